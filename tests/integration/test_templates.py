"""A job made by `pipelines new` passes its own generated test at once, in a fresh copy
of the project (so nothing here leaks into the working tree)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from pipelines import jars
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

SKIP = shutil.ignore_patterns(".git", ".venv", ".local", "dist", "__pycache__", "lib", "build",
                              ".pytest_cache", "*.egg-info")


@pytest.mark.parametrize("template", ["enrich", "windowed"])
def test_new_job_passes_its_own_test(tmp_path, kafka, template):
    copy = tmp_path / "project"
    shutil.copytree(ROOT, copy, ignore=SKIP)
    env = {**os.environ, "PYTHONPATH": str(copy), "PIPELINES_JAR_LIB": str(jars.LIB_DIR)}
    name = f"my_{template}"
    made = subprocess.run([sys.executable, "-m", "pipelines.cli", "new", name, "--from", template],
                          cwd=copy, env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert f"created pipelines/jobs/{name}.py" in made.stdout
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"tests/integration/test_job_{name}.py"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    print(tested.stdout[-400:])
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-2000:]
    assert "1 passed" in tested.stdout
