"""What owns processes reads them through one module, pipelines/running/processes.py, and
that module through psutil (the same calls on Linux and macOS): each of its calls checked
here on real processes, and a grep that nothing else reads /proc."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.running import processes
from pipelines.running.processes import (
    PidFile,
    ProcessGroups,
    command_line,
    command_lines,
    cpu_seconds,
    descendants,
    end_groups,
    environment,
    group_alive,
    groups_of_ours,
    listening,
    process,
    program_name,
    resident_bytes,
    snapshot,
    start_identity,
    start_time,
    sweep_scratch,
)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# A parent that starts a child (both in one new group), listens on a port and waits.
TREE = """
import socket, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(child.pid, s.getsockname()[1], flush=True)
time.sleep(120)
"""


@pytest.fixture
def tree():
    owner = ProcessGroups()
    proc = owner.popen(
        [sys.executable, "-c", TREE, "--marker-of-this-test"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PIPELINES_PROBE": "env-marker"},
    )
    child, port = map(int, proc.stdout.readline().split())
    yield proc, child, port, owner
    owner.end(grace_s=2)


def test_no_module_but_processes_reads_proc_and_it_reads_through_psutil():
    reads = re.compile(r"""["'](/proc\b)""")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("pipelines", "pipelines_dev", "bench", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if reads.search(line)
    ]
    assert found == []
    source = Path(processes.__file__).read_text()
    assert "import psutil" in source


def test_a_snapshot_sees_parents_groups_sessions_and_start_times(tree):
    proc, child, _, owner = tree
    seen = snapshot()
    assert seen[child].ppid == proc.pid
    assert seen[child].pgid == seen[proc.pid].pgid == proc.pid  # its own group, from popen
    assert seen[proc.pid].sid == os.getsid(0)
    assert process(child) == seen[child]
    assert abs(start_time(child) - time.time()) < 120
    assert descendants(proc.pid) == {proc.pid, child}
    assert sorted(owner.members()) == sorted([proc.pid, child])


def test_command_line_environment_name_cpu_and_memory_of_a_process(tree):
    proc, child, _, _ = tree
    assert command_line(proc.pid).endswith("--marker-of-this-test")
    assert command_lines()[proc.pid] == command_line(proc.pid)
    assert environment(proc.pid)["PIPELINES_PROBE"] == "env-marker"
    assert program_name(proc.pid).startswith("python")
    assert cpu_seconds(proc.pid) is not None and cpu_seconds(proc.pid) >= 0
    assert resident_bytes(proc.pid) > 1_000_000


def test_listening_sockets_are_found_with_their_owner(tree):
    proc, _, port, _ = tree
    assert listening({proc.pid}) == {f"127.0.0.1|{port}": proc.pid}


def test_a_group_is_alive_until_ended_and_then_every_member_is_gone(tree):
    proc, child, _, _ = tree
    assert group_alive(proc.pid)
    assert groups_of_ours([proc.pid], "--marker-of-this-test") == [proc.pid]
    assert groups_of_ours([proc.pid], "not-a-marker-anywhere") == []
    end_groups([proc.pid], grace_s=2)
    proc.wait(5)
    deadline = time.monotonic() + 10
    while (
        process(child) is not None and not process(child).zombie
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(proc.pid)
    assert start_time(proc.pid) is None and command_line(proc.pid) == ""
    assert cpu_seconds(proc.pid) is None and resident_bytes(proc.pid) is None


def test_a_pid_file_names_one_process_and_a_stale_one_is_removed_unsignalled(tmp_path, tree):
    proc, _, _, _ = tree
    pid_file = PidFile(tmp_path / "probe.pid", "--marker-of-this-test", "probe")
    pid_file.write(proc.pid)
    assert pid_file.live() == proc.pid
    pid, started = pid_file.path.read_text().split()
    pid_file.path.write_text(f"{pid} {float(started) - 1}\n")  # the pid, another start
    assert pid_file.live() is None and not pid_file.path.exists()
    assert proc.poll() is None  # nothing signalled


def test_the_reaper_ends_the_groups_when_its_owner_is_killed(tmp_path):
    """The backstop: an owner SIGKILLed (no code of ours runs) leaves no process behind."""
    script = (
        "import subprocess, sys, time\n"
        "from pipelines.running.processes import ProcessGroups\n"
        "owner = ProcessGroups()\n"
        "p = owner.popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT, start_new_session=True)  # fmt: skip
    held = int(owner.stdout.readline())
    assert group_alive(held)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(5)
    deadline = time.monotonic() + 20
    while group_alive(held) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(held)


def test_scratch_of_a_gone_owner_is_swept_and_of_a_live_one_kept(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead, alive = tmp_path / f"probe-{gone.pid}-x", tmp_path / f"probe-{os.getpid()}-y"
    for path in (dead, alive):
        path.mkdir()
        os.utime(path, (time.time() - 120, time.time() - 120))
    sweep_scratch("probe-", min_age_s=60)
    assert not dead.exists() and alive.exists()


@pytest.mark.skipif(sys.platform != "linux", reason="psutil re-reads the boot time on Linux")
def test_a_pid_file_still_names_its_process_after_the_clock_is_stepped(tmp_path, monkeypatch):
    """psutil's start time is the boot time plus the start since boot, and it reads the
    boot time again each call: a clock step moves it. The pid file's identity must not."""
    import psutil._pslinux as backend

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pid_file = PidFile(tmp_path / "x.pid", "time.sleep", "x")
        pid_file.write(proc.pid)
        before, identity = start_time(proc.pid), start_identity(proc.pid)
        stepped = backend.boot_time() + 3.0
        monkeypatch.setattr(backend, "boot_time", lambda: stepped)
        assert start_time(proc.pid) == pytest.approx(before + 3.0)  # what moved
        assert start_identity(proc.pid) == identity
        assert pid_file.live() == proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("attempt", range(3))
def test_a_group_that_needed_sigkill_has_exited_when_end_groups_returns(attempt, tmp_path):
    """SIGKILL is delivered, not waited for: end_groups waits for the killed group to exit,
    so its caller never finds a process of it still running."""
    from pipelines.running.processes import end_groups

    shell = "trap '' TERM; : > \"$0\"; while :; do sleep 0.01; done"
    ready = [tmp_path / f"{i}.ready" for i in range(4)]
    procs = [subprocess.Popen(["bash", "-c", shell, str(r)], start_new_session=True) for r in ready]
    try:
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in ready):  # SIGTERM is ignored from here on
            assert time.monotonic() < deadline, "the shells did not start within 60 s"
            time.sleep(0.02)
        end_groups([p.pid for p in procs], grace_s=0.2)
        assert [p.poll() for p in procs] == [-signal.SIGKILL] * 4
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_process_whose_main_thread_ended_first_runs_until_its_last_thread_does(tmp_path):
    """A JVM's main thread can end before its others (under SIGKILL): the process then shows
    as a zombie while it still runs. Taken for ended, ProcessGroups.end() returned with a
    Beam Java service still running; here it counts as alive until its last thread ends."""
    import psutil

    ready = tmp_path / "ready"
    script = (
        "import ctypes, signal, sys, threading, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "threading.Thread(target=time.sleep, args=(120,)).start()\n"
        "open(sys.argv[1], 'w').close()\n"
        "ctypes.CDLL(None).pthread_exit(None)\n"  # the main thread ends, the other sleeps on
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(ready)], process_group=0)
    try:
        deadline = time.monotonic() + 60
        while not (ready.exists() and psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE):
            assert time.monotonic() < deadline, "the main thread did not end within 60 s"
            time.sleep(0.02)
        assert proc.poll() is None  # not waitable: a thread still runs
        assert group_alive(proc.pid)
        assert process(proc.pid).zombie is False
        end_groups([proc.pid], grace_s=0.2)
        assert proc.poll() == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_until_stopped_waits_for_a_sigstop_to_take_and_says_when_it_did_not():
    """A freeze (pipelines_dev.faults.frozen) holds its body until every process it stopped
    is stopped: a process signalled but not yet scheduled still runs."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert not processes.until_stopped([proc.pid], 0.3)  # running, not signalled
        os.kill(proc.pid, signal.SIGSTOP)
        assert processes.until_stopped([proc.pid], 30)
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)
        assert processes.until_stopped([proc.pid, 2**22 + 1], 0)  # gone, or never there
    finally:
        proc.kill()
        proc.wait(timeout=10)
