""".ci/run ends its test run and cleans up however it ends: SIGTERM, SIGINT, a failure.

The script itself runs for real; `make` and `.ci/docker-engine` are stand-ins on PATH (a
`make test` that starts a child process and ignores SIGTERM, the worst case for a stop), so
each test shows what the script does, in seconds, without a real suite."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pipelines.running.processes import process
from tests.support import ROOT

pytestmark = pytest.mark.unit

FAKE_MAKE = """#!/usr/bin/env bash
log="$CI_FAKE_LOG"
case " $* " in
  *" test "*)
    trap '' TERM                           # a test run slow to stop: only SIGKILL ends it
    sleep 300 &                            # a service the run started, in its group
    echo "child $!" >> "$log"
    echo "test $$" >> "$log"
    if [ -n "${CI_FAKE_EXIT:-}" ]; then exit "$CI_FAKE_EXIT"; fi
    wait
    ;;
  *" clean"*) echo "clean" >> "$log" ;;
esac
"""

FAKE_ENGINE = """#!/usr/bin/env bash
echo "engine $*" >> "$CI_FAKE_LOG"
if [ "$1" = up ]; then setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!; fi
if [ "$1" = down ]; then kill -TERM -- "-$2"; fi
"""


@pytest.fixture
def ci_tree(tmp_path):
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "run", tmp_path / ".ci" / "run")
    engine = tmp_path / ".ci" / "docker-engine"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(FAKE_MAKE)
    (bin_dir / "make").chmod(0o755)
    log = tmp_path / "log"
    log.touch()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CI_FAKE_LOG": str(log),
        "CI_TEST_GRACE_S": "2",
    }
    return tmp_path, env, log


def _lines(log: Path, prefix: str) -> list[str]:
    return [
        line.split(" ", 1)[1] for line in log.read_text().splitlines() if line.startswith(prefix)
    ]


def _alive(pid: int) -> bool:
    found = process(pid)
    return found is not None and not found.zombie


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_test_run_and_cleans_up_within_30_s(ci_tree, signum):
    tree, env, log = ci_tree
    # As a terminal or a CI runner that can deliver it starts it: SIGINT not ignored (this
    # suite itself may run with SIGINT ignored, as `.ci/run` starts it in the background).
    ci = subprocess.Popen(
        ["bash", ".ci/run"],
        cwd=tree,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _wait_for(lambda: _lines(log, "child"), 20, "the fake test run to start")
        child = int(_lines(log, "child")[0])
        started = time.monotonic()
        ci.send_signal(signum)
        code = ci.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        if ci.poll() is None:
            os.killpg(ci.pid, signal.SIGKILL)
    assert code == 128 + signum, code
    assert took < 30, took
    assert "clean" in log.read_text().splitlines()
    _wait_for(lambda: not _alive(child), 5, "the test run's child to be gone")
    downs = [line for line in log.read_text().splitlines() if line.startswith("engine down")]
    assert len(downs) == 1, log.read_text()


def test_a_failing_test_run_keeps_its_exit_code_and_cleans_up(ci_tree):
    tree, env, log = ci_tree
    env["CI_FAKE_EXIT"] = "3"
    proc = subprocess.run(["bash", ".ci/run"], cwd=tree, env=env, timeout=60)
    assert proc.returncode == 3
    lines = log.read_text().splitlines()
    assert "clean" in lines
    assert any(line.startswith("engine down") for line in lines), lines
    child = int(_lines(log, "child")[0])
    _wait_for(lambda: not _alive(child), 20, "the test run's child to be gone")
