"""requirements.lock is what pyproject.toml asks for, and what this venv runs: a fresh
clone next month installs the versions these tests ran, every file checked by hash."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCKED_EXTRAS = ("test", "bench")  # with the runtime's; `mutation` is installed on demand
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s;]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def _declared() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in LOCKED_EXTRAS:
        lines += project["optional-dependencies"][extra]
    return {canonicalize_name(r.name): r for r in map(Requirement, lines)}


def _locked() -> dict[str, tuple[str, Marker | None, list[str], list[str]]]:
    """name -> (version, marker, hashes, what it is there for)."""
    found: dict[str, tuple[str, Marker | None, list[str], list[str]]] = {}
    name = None
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        pin = PIN.match(line)
        if pin:
            name = canonicalize_name(pin.group(1))
            marker = Marker(pin.group(3)) if pin.group(3) else None
            found[name] = (pin.group(2), marker, [], [])
        elif name and line.strip().startswith("--hash=sha256:"):
            found[name][2].append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
        elif name and line.startswith("    #") and not line.strip().endswith("# via"):
            found[name][3].append(line.strip().lstrip("#").strip().removeprefix("via ").strip())
    return found


def test_every_declared_dependency_is_locked_at_a_version_it_allows():
    locked = _locked()
    wrong = {
        name: (str(req.specifier), locked.get(name, ("not locked",))[0])
        for name, req in _declared().items()
        if name not in locked or not req.specifier.contains(locked[name][0], prereleases=True)
    }
    assert wrong == {}, "pyproject.toml and requirements.lock disagree: run `make lock`"


def test_the_lock_holds_no_direct_dependency_pyproject_no_longer_declares():
    direct = {n for n, (_, _, _, why) in _locked().items() if "pipelines (pyproject.toml)" in why}
    assert direct == set(_declared()), "run `make lock`"


def test_every_locked_file_is_hashed():
    unhashed = [name for name, (_, _, hashes, _) in _locked().items() if not hashes]
    assert unhashed == []
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for _, _, hashes, _ in _locked().values()
               for h in hashes)  # fmt: skip


def test_this_venv_runs_the_locked_versions():
    """What `make venv` installed: each locked package that applies to this machine, at its
    locked version."""
    differs = {}
    for name, (version, marker, _, _) in _locked().items():
        if marker is not None and not marker.evaluate():
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != version:
            differs[name] = (version, installed)
    assert differs == {}, "run `make venv`"
