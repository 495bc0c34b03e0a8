"""A missing or corrupt connector jar is one readable line before Flink starts."""

from __future__ import annotations

import shutil

import pytest

from pipelines.host import jars
from tests.support import run_cli

pytestmark = pytest.mark.integration


def _run(lib_dir):
    return run_cli(
        "run",
        "passthrough",
        "--skip-preflight",
        check=False,
        timeout=120,
        env={"PIPELINES_JAR_LIB": str(lib_dir)},
    )


def test_missing_jar_says_run_make_jars(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"error: missing jar {tmp_path}/flink-sql-connector-kafka-5.0.0-2.2.jar "
        f"(org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2): run `make jars`; "
        f"missing jar {tmp_path}/pipelines-flink.jar (built from jars/src): run `make jars`"
    ]


def test_corrupt_jar_is_caught_by_its_checksum(tmp_path):
    pinned = jars.read_manifest()[0]
    broken = tmp_path / pinned.path.name
    shutil.copy(pinned.path, broken)
    with broken.open("r+b") as handle:
        handle.truncate(1000)
    shutil.copy(jars.PROJECT_JAR, tmp_path / jars.PROJECT_JAR.name)
    proc = _run(tmp_path)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: jar {broken} does not match its pinned sha256 (")
    assert line.endswith("...): delete it and run `make jars`")
