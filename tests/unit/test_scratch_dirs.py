"""A run's scratch dirs (its JVMs' temp dirs) are removed on every exit path: by the owner
when it ends its groups, by the reaper when the owner is killed, and by the next run when
both were (a crash)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from pipelines.running.processes import ProcessGroups, sweep_scratch
from tests.support import run_python, wait_until

pytestmark = pytest.mark.unit


def _prefix() -> str:
    return f"pipelines-test-{uuid.uuid4().hex[:8]}-"


def test_the_owner_removes_its_scratch_dir_after_its_groups_end():
    owner = ProcessGroups()
    proc = owner.popen(["sleep", "60"])
    path = owner.scratch_dir(_prefix())
    (path / "minicluster_x").mkdir()
    (path / "minicluster_x" / "rpc.jar").write_bytes(b"x" * 1024)
    assert oct(path.stat().st_mode & 0o777) == "0o700"
    owner.end()
    assert proc.poll() is not None
    assert not path.exists()


def test_the_reaper_removes_it_when_the_owner_is_killed():
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pipelines.running.processes import ProcessGroups
        owner = ProcessGroups()
        owner.popen(["sleep", "60"])
        path = owner.scratch_dir({_prefix()!r})
        (path / "left-by-the-jvm").write_text("x")
        print(path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no handler of ours runs
    """)
    proc = run_python(script, timeout=60)
    path = Path(proc.stdout.strip())
    assert proc.returncode == -9 and path.name, proc.stderr[-2000:]
    wait_until(lambda: not path.exists(), 30, f"the reaper to remove {path}")


def test_a_crashed_runs_dir_is_swept_by_the_next_but_a_live_ones_is_kept():
    prefix = _prefix()
    gone = subprocess.Popen(["true"])
    gone.wait()
    tmp = Path(tempfile.gettempdir())
    dead = tmp / f"{prefix}{gone.pid}-abc"
    live = tmp / f"{prefix}{os.getpid()}-def"
    fresh = tmp / f"{prefix}{gone.pid}-ghi"
    for path in (dead, live, fresh):
        path.mkdir()
        (path / "file").write_text("x")
    old = time.time() - 120
    for path in (dead, live):
        os.utime(path, (old, old))
    try:
        sweep_scratch(prefix)
        assert not dead.exists()  # its owner is gone
        assert live.exists()  # its owner runs
        assert fresh.exists()  # changed a moment ago: its reaper may still be at work
    finally:
        for path in (dead, live, fresh):
            subprocess.run(["rm", "-rf", str(path)], check=True)
