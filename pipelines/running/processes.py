"""Owning the processes a run starts, so that none outlives it on any exit path.

A local run starts a JVM (the mini-cluster, through PyFlink's gateway), which starts
Python workers (`pyflink-udf-runner.sh` -> `beam_boot` | `tee`). Killing only the JVM
orphans the workers (they were seen alive with parent PID 1 long after CI ended), so the
JVM is started in a process group of its own and the whole group is ended.

Normal exits, exceptions and signals end the group from `ProcessGroups.end()`. For the
one path no code of ours runs on, SIGKILL of this process, a small reaper process (in a
session of its own, so the terminal's Ctrl-C and a CI runner's group kill do not reach
it) holds the read end of a pipe: when this process dies for any reason the pipe closes
and the reaper ends every group it was told about, then exits.

This is the one module that reads other processes (their parents, groups, start times,
command lines), and it does so through psutil, not /proc: the same calls on Linux and
macOS (tests/unit/test_processes.py checks each, and that nothing else reads /proc).
Process groups and sessions are POSIX (os.getpgid, os.getsid, os.killpg).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

GRACE_S = 5.0
# A SIGKILLed group exits in milliseconds idle; a JVM on a busy machine takes longer.
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class Proc:
    """One process as a snapshot saw it. `started` (seconds since the epoch) with the pid
    names one process: a reused pid has another start time."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    started: float
    zombie: bool


def _proc(p: psutil.Process, info: dict | None = None) -> Proc | None:
    info = info if info is not None else p.as_dict(["ppid", "status", "create_time"])
    try:
        pgid, sid = os.getpgid(p.pid), os.getsid(p.pid)
    except (ProcessLookupError, PermissionError):
        return None
    if info.get("ppid") is None or info.get("create_time") is None:
        return None  # gone while it was read
    zombie = info.get("status") == psutil.STATUS_ZOMBIE and not _threads_left(p)
    return Proc(p.pid, info["ppid"], pgid, sid, info["create_time"], zombie)


def _threads_left(p: psutil.Process) -> bool:
    """Whether a process whose main thread shows as a zombie still has threads running: the
    main thread of a JVM exiting under SIGKILL can end before the rest, and taking that for
    the end would let ProcessGroups.end() return with a Beam Java service still running,
    not yet waitable. A process that has fully exited counts 1 thread."""
    try:
        return p.num_threads() > 1
    except (psutil.Error, ValueError):
        return False


def snapshot() -> dict[int, Proc]:
    """Every process of the machine that could be read, by pid."""
    out: dict[int, Proc] = {}
    for p in psutil.process_iter(["ppid", "status", "create_time"]):
        found = _proc(p, p.info)
        if found is not None:
            out[p.pid] = found
    return out


def process(pid: int) -> Proc | None:
    """`pid` now; None when no such process (or it cannot be read)."""
    try:
        return _proc(psutil.Process(pid))
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def command_line(pid: int) -> str:
    """`pid`'s arguments joined by spaces; "" when it is gone, unreadable or a zombie."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.Error, ValueError):
        return ""


def command_lines() -> dict[int, str]:
    """Every readable process's arguments joined by spaces, by pid (one pass)."""
    return {
        p.pid: " ".join(p.info["cmdline"])
        for p in psutil.process_iter(["cmdline"])
        if p.info.get("cmdline")
    }


def environment(pid: int) -> dict[str, str]:
    """`pid`'s environment as it started ({} when it cannot be read)."""
    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, ValueError):
        return {}


def program_name(pid: int) -> str:
    """The short name of `pid`'s program (`java`, `python3.11`); "" when gone."""
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, ValueError):
        return ""


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time `pid` has used; None when it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.Error, ValueError):
        return None
    return times.user + times.system


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of `pid`: its name and the CPU seconds (user + system) it has used;
    {} when the process is gone, a thread that ended meanwhile left out."""
    try:
        threads = psutil.Process(pid).threads()
    except (psutil.Error, ValueError):
        return {}
    named = {}
    for thread in threads:
        try:
            name = psutil.Process(thread.id).name()  # Linux: a thread's own comm
        except (psutil.Error, ValueError):
            continue
        named[thread.id] = (name, thread.user_time + thread.system_time)
    return named


def resident_bytes(pid: int) -> int | None:
    """`pid`'s resident memory; None when it is gone."""
    try:
        return psutil.Process(pid).memory_info().rss
    except (psutil.Error, ValueError):
        return None


def listening(pids) -> dict[str, int]:
    """{"address|port": pid} of every TCP socket in LISTEN state held by one of `pids`."""
    found: dict[str, int] = {}
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except (psutil.Error, ValueError):
            continue
        for c in connections:
            if c.status == psutil.CONN_LISTEN and c.laddr:
                found[f"{c.laddr.ip}|{c.laddr.port}"] = pid
    return found


def until_stopped(pids: list[int], wait_s: float) -> bool:
    """Wait up to `wait_s` until none of `pids` runs: each stopped by a signal (SIGSTOP
    takes effect when the process is next scheduled, later on a busy machine) or gone."""
    deadline = time.monotonic() + wait_s
    while True:
        running = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() not in (
                    psutil.STATUS_STOPPED,
                    psutil.STATUS_ZOMBIE,
                ):
                    running.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not running:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. An exited child of ours stays a zombie
    until its parent (PyFlink's Popen, say) reads its status; it counts as ended."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(p.pgid == pgid and not p.zombie for p in snapshot().values())


def end_groups(pgids: list[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM each group, wait up to `grace_s` for it to empty, then SIGKILL what is left
    and wait (up to KILL_WAIT_S) until it has exited: SIGKILL is delivered, not waited for,
    and a JVM takes a while to exit: returning earlier would let a caller find a killed Beam
    Java service still running."""
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    until_ended(pgids, grace_s)
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    until_ended(pgids, KILL_WAIT_S)


def until_ended(pgids: list[int], wait_s: float) -> bool:
    """Wait up to `wait_s` for every group of `pgids` to have no running process; whether
    they all ended."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(group_alive(g) for g in pgids):
        time.sleep(0.05)
    return not any(group_alive(g) for g in pgids)


class ProcessGroups:
    """The process groups this process owns, with a reaper as the backstop."""

    def __init__(self) -> None:
        self.groups: list[int] = []
        self.scratch: list[Path] = []
        self._reaper: subprocess.Popen | None = None

    def _ensure_reaper(self) -> subprocess.Popen:
        if self._reaper is None or self._reaper.poll() is not None:
            self._reaper = subprocess.Popen(
                [sys.executable, "-m", "pipelines.running.processes"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": _package_parent()},
            )
        return self._reaper

    def _tell_reaper(self, line: str) -> None:
        reaper = self._ensure_reaper()
        assert reaper.stdin is not None
        reaper.stdin.write(f"{line}\n".encode())
        reaper.stdin.flush()

    def adopt(self, pgid: int) -> None:
        """Own the process group `pgid` from now on (its leader must already exist)."""
        self.groups.append(pgid)  # first: end() ends it even if the reaper cannot be told
        self._tell_reaper(str(pgid))

    def scratch_dir(self, prefix: str) -> Path:
        """A private directory under the system's temp dir, removed after the groups end (by
        `end()`, or by the reaper when this process is killed): for what the processes write
        there and never remove when they are ended (a mini-cluster's working directory and
        its extracted RPC jar: 32 MB per run, left in /tmp by every ended gateway JVM)."""
        sweep_scratch(prefix)
        path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
        self.scratch.append(path)
        self._tell_reaper(f"dir {path}")
        return path

    def popen(self, args, **kwargs) -> subprocess.Popen:
        """Popen in a new process group owned by this object."""
        proc = subprocess.Popen(args, process_group=0, **kwargs)
        self.adopt(proc.pid)
        return proc

    def end(self, grace_s: float = GRACE_S) -> None:
        """End every owned group (bounded by about `grace_s`), then let the reaper go."""
        groups, self.groups = self.groups, []
        if groups:
            end_groups(groups, grace_s)
        scratch, self.scratch = self.scratch, []
        for path in scratch:
            shutil.rmtree(path, ignore_errors=True)
        if self._reaper is not None:
            try:
                assert self._reaper.stdin is not None
                self._reaper.stdin.close()  # EOF: the reaper finds the groups gone and exits
            except OSError:
                pass
            try:
                self._reaper.wait(timeout=grace_s + 2)
            except subprocess.TimeoutExpired:
                self._reaper.kill()
            self._reaper = None

    def members(self) -> list[int]:
        """PIDs now in the owned groups (for progress and for tests)."""
        return [pid for pid, p in snapshot().items() if p.pgid in self.groups]


def start_time(pid: int) -> float | None:
    """When `pid` started (seconds since the epoch); None when it is gone or a zombie. With
    the pid, it names one process: a reused pid has another start time."""
    found = process(pid)
    return found.started if found is not None and not found.zombie else None


def start_identity(pid: int) -> float | None:
    """A value that, with the pid, names one process over time; None when it is gone or a
    zombie. On Linux its start in seconds since boot: psutil's start time adds the boot
    time, which it reads again on every call and which moves when the clock is stepped: a
    pid file would then name a live broker as another process, and it would never be
    stopped. Elsewhere the start psutil reports."""
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        try:
            backend = getattr(p, "_proc")  # psutil's Linux backend takes `monotonic`
            return float(backend.create_time(monotonic=True))
        except (AttributeError, TypeError):
            return p.create_time()
    except (psutil.Error, ValueError):
        return None


# How long a process whose command line and environment are empty (inside execve) is looked
# at again before that is taken as an answer.
EXEC_WAIT_S = 2.0


def _mentions(pid: int, marker: bytes, exec_wait_s: float = 0.0) -> bool:
    """Whether `marker` is in the process's command line or environment (a Flink daemon's
    FLINK_CONF_DIR, inherited by the Python workers it starts).

    A process caught inside execve shows an empty command line and environment: the
    kernel closes the parent's close-on-exec pipe (so Popen has returned) before the new
    program's arguments are mapped. With `exec_wait_s`, empty is looked at again for that
    long instead of being read as "another program"."""
    deadline = time.monotonic() + exec_wait_s
    text = marker.decode(errors="replace")
    while True:
        line = command_line(pid)
        values = environment(pid)
        if text in line or any(text in f"{k}={v}" for k, v in values.items()):
            return True
        found = process(pid)
        if line or values or time.monotonic() >= deadline or not found or found.zombie:
            return False
        time.sleep(0.02)


def wait_started(proc: subprocess.Popen, ready: Callable[[], bool], wait_s: float) -> bool:
    """Poll a service just started until `ready()` answers: True. False when the process
    exited first (its returncode is set) or `wait_s` ran out (returncode None)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if ready():
            return True
        time.sleep(0.2)
    return False


class PidFile:
    """A pid file that names one process: its pid, its start (start_identity) and a marker of its
    command line. `live()` answers only for that process; a file left by a process that
    is gone, or whose pid now belongs to another program, is removed with a line saying
    so, and nothing is signalled."""

    def __init__(self, path: Path, marker: str, what: str):
        self.path, self.marker, self.what = path, marker.encode(), what

    def write(self, pid: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        started = start_identity(pid)
        # Unreadable at this moment: the pid alone, and live() goes by the marker (a stamp
        # of 0 would call the process stale later and leave it running).
        stamp = f" {_stamp(started)}" if started is not None else ""
        self.path.write_text(f"{pid}{stamp}\n")

    def live(self) -> int | None:
        try:
            fields = self.path.read_text().split()
        except OSError:
            return None
        try:
            pid, started = int(fields[0]), float(fields[1]) if len(fields) > 1 else None
        except (ValueError, IndexError):
            self._stale("it holds no pid")
            return None
        now = start_identity(pid)
        if now is None:
            self._stale(f"pid {pid} is not running")
            return None
        if started is not None and _stamp(now) != _stamp(started):
            self._stale(f"pid {pid} is another process now: {_shown(command_line(pid))}")
            return None
        if _mentions(pid, self.marker, exec_wait_s=EXEC_WAIT_S):
            return pid
        seen = command_line(pid)
        if started is not None and not seen and not environment(pid):
            # Its own start time and nothing readable: still inside execve, for longer than
            # the wait (a loaded machine). The start time names it; it is the process.
            return pid
        self._stale(f"pid {pid} is another process now: {_shown(seen)}")
        return None

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def _stale(self, why: str) -> None:
        import logging

        logging.getLogger(__name__).info(
            f"{self.what}: removed the stale pid file {self.path} ({why}); nothing signalled"
        )
        self.remove()
        return None


def _shown(line: str) -> str:
    return line[:120] or "no command line readable"


def _stamp(started: float) -> str:
    """A start time as a pid file holds it (centiseconds: what every platform resolves)."""
    return f"{started:.2f}"


def groups_of_ours(pgids: list[int], marker: str) -> list[int]:
    """The groups among `pgids` that still hold a live process mentioning `marker`: a group
    id recorded long ago may belong to another program's processes now."""
    members: dict[int, list[int]] = {}
    for pid, p in snapshot().items():
        if not p.zombie:
            members.setdefault(p.pgid, []).append(pid)
    return [g for g in pgids if any(_mentions(p, marker.encode()) for p in members.get(g, ()))]


def sweep_scratch(prefix: str, min_age_s: float = 60.0) -> None:
    """Remove scratch dirs of `prefix` whose owner is gone: what a crash of the owner and
    its reaper both (a machine's SIGKILL to everything) left behind. A dir whose PID lives
    is kept, whoever now has that PID; one changed in the last `min_age_s` is kept too (its
    reaper may still be ending the groups that use it)."""
    root = Path(tempfile.gettempdir())
    for path in root.glob(f"{prefix}*-*"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or process(int(pid)) is not None:
            continue
        try:
            info = path.stat()
        except OSError:
            continue
        if info.st_uid == os.getuid() and time.time() - info.st_mtime >= min_age_s:
            shutil.rmtree(path, ignore_errors=True)


def _package_parent() -> str:
    here = str(Path(__file__).resolve().parents[2])  # the directory holding `pipelines`
    existing = os.environ.get("PYTHONPATH")
    return f"{here}:{existing}" if existing else here


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it in the parent tree."""
    children: dict[int, list[int]] = {}
    for child, p in snapshot().items():
        children.setdefault(p.ppid, []).append(child)
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.add(current)
        todo.extend(children.get(current, ()))
    return found


def _reap() -> int:
    """The reaper: read PGIDs (and `dir <path>` lines) until EOF (the owner is gone,
    however it went), end the groups, then remove the directories."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    groups: list[int] = []
    scratch: list[str] = []
    for line in sys.stdin.buffer:
        text = line.decode(errors="replace").strip()
        if text.startswith("dir "):
            scratch.append(text[4:])
            continue
        try:
            groups.append(int(text))
        except ValueError:
            continue
    live = [g for g in groups if group_alive(g)]
    if live:
        end_groups(live)
    for path in scratch:
        shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(_reap())
