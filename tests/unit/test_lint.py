"""`make lint` passes: pyflakes checks, import order and formatting (ruff, configured in
pyproject.toml). Run `make format` to fix the last two."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["pipelines", "tests", "bench"]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_passes(command):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command, *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
