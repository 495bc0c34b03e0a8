"""Prism is built with its two listeners on loopback: the patch applies to the pinned
module's source exactly, and refuses a source where it no longer matches."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from pipelines.beam.java import (
    PRISM_MODULE,
    PRISM_PATCHES,
    PRISM_VERSION,
    BeamSetupError,
    _go,
    patch_prism_source,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def module_dir():
    out = subprocess.run(
        [_go(), "mod", "download", "-json", f"{PRISM_MODULE}@{PRISM_VERSION}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)["Dir"]


def _copy(module_dir, tmp_path):
    from pathlib import Path

    for relative, _, _ in PRISM_PATCHES:
        target = tmp_path / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(module_dir) / relative, target)
        target.chmod(0o644)
    return tmp_path


def test_the_loopback_patch_applies_to_the_pinned_prism(module_dir, tmp_path):
    root = _copy(module_dir, tmp_path)
    patch_prism_source(root)
    for relative, old, new in PRISM_PATCHES:
        text = (root / relative).read_text()
        assert old not in text and text.count(new) == 1
    assert 'net.Listen("tcp", ":' not in "".join(
        (root / relative).read_text() for relative, _, _ in PRISM_PATCHES
    )


def test_a_source_the_patch_no_longer_matches_is_refused(module_dir, tmp_path):
    root = _copy(module_dir, tmp_path)
    patch_prism_source(root)  # applied once: a second time matches nothing
    with pytest.raises(BeamSetupError, match="the Prism loopback patch no longer applies"):
        patch_prism_source(root)
