"""`make lint` passes: pyflakes checks, import order and formatting (ruff) and the type
checker (mypy), configured in pyproject.toml. `make format` fixes order and formatting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["pipelines", "pipelines_dev", "tests", "bench"]


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


def test_mypy_passes():
    """The type checker over pipelines/ ([tool.mypy]: the stage, lookup, testing and job
    modules fully typed; PyFlink and confluent-kafka calls unchecked, they ship no types)."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
    assert "Success: no issues found" in proc.stdout


def test_no_function_in_the_runtime_is_longer_than_a_screen(tmp_path):
    from pipelines_dev.function_length import long_functions, main

    assert main([str(ROOT / "pipelines")]) == 0
    probe = tmp_path / "probe.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    probe.write_text(f"def short():\n    pass\n\n\n@staticmethod\ndef long():\n{body}")
    assert long_functions(probe) == [f"{probe}:5: long is 82 lines (at most 80)"]
