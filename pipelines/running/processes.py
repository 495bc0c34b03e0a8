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
from pathlib import Path

GRACE_S = 5.0


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. An exited child of ours stays a zombie
    until its parent (PyFlink's Popen, say) reads its status; it counts as ended."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(int(fields[2]) == pgid and fields[0] != "Z" for fields in proc_stats().values())


def end_groups(pgids: list[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM each group, wait up to `grace_s` for it to empty, then SIGKILL what is left."""
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(g) for g in pgids):
        time.sleep(0.05)
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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
        return [pid for pid, pgid in _process_groups().items() if pgid in self.groups]


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/<pid>/stat field 22): with the pid,
    it names one process; a reused pid has another start time."""
    fields = proc_stats_of(pid)
    return int(fields[19]) if fields and fields[0] != "Z" else None


def proc_stats_of(pid: int) -> list[str] | None:
    """The fields after the command name of /proc/<pid>/stat; None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _mentions(pid: int, marker: bytes, exec_wait_s: float = 0.0) -> bool:
    """Whether `marker` is in the process's command line or environment (a Flink daemon's
    FLINK_CONF_DIR, inherited by the Python workers it starts).

    A process caught inside execve shows an empty command line and environment: the
    kernel closes the parent's close-on-exec pipe (so Popen has returned) before the new
    program's arguments are mapped. With `exec_wait_s`, empty is looked at again for that
    long instead of being read as "another program"."""
    deadline = time.monotonic() + exec_wait_s
    while True:
        seen = b""
        for part in ("cmdline", "environ"):
            try:
                seen += Path(f"/proc/{pid}/{part}").read_bytes()
            except OSError:
                continue
        if marker in seen:
            return True
        stats = proc_stats_of(pid)
        if seen or time.monotonic() >= deadline or not stats or stats[0] == "Z":
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
    """A pid file that names one process: its pid, its start time and a marker of its
    command line. `live()` answers only for that process; a file left by a process that
    is gone, or whose pid now belongs to another program, is removed with a line saying
    so, and nothing is signalled."""

    def __init__(self, path: Path, marker: str, what: str):
        self.path, self.marker, self.what = path, marker.encode(), what

    def write(self, pid: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"{pid} {start_time(pid) or 0}\n")

    def live(self) -> int | None:
        try:
            fields = self.path.read_text().split()
        except OSError:
            return None
        try:
            pid, started = int(fields[0]), int(fields[1]) if len(fields) > 1 else None
        except (ValueError, IndexError):
            self._stale("it holds no pid")
            return None
        now = start_time(pid)
        if now is None:
            self._stale(f"pid {pid} is not running")
            return None
        if (started is not None and now != started) or not _mentions(
            pid, self.marker, exec_wait_s=2.0
        ):
            self._stale(f"pid {pid} is another process now")
            return None
        return pid

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def _stale(self, why: str) -> None:
        import logging

        logging.getLogger(__name__).info(
            f"{self.what}: removed the stale pid file {self.path} ({why}); nothing signalled"
        )
        self.remove()
        return None


def groups_of_ours(pgids: list[int], marker: str) -> list[int]:
    """The groups among `pgids` that still hold a live process mentioning `marker`: a group
    id recorded long ago may belong to another program's processes now."""
    members: dict[int, list[int]] = {}
    for pid, fields in proc_stats().items():
        if fields[0] != "Z":
            members.setdefault(int(fields[2]), []).append(pid)
    return [g for g in pgids if any(_mentions(p, marker.encode()) for p in members.get(g, ()))]


def sweep_scratch(prefix: str, min_age_s: float = 60.0) -> None:
    """Remove scratch dirs of `prefix` whose owner is gone: what a crash of the owner and
    its reaper both (a machine's SIGKILL to everything) left behind. A dir whose PID lives
    is kept, whoever now has that PID; one changed in the last `min_age_s` is kept too (its
    reaper may still be ending the groups that use it)."""
    root = Path(tempfile.gettempdir())
    for path in root.glob(f"{prefix}*-*"):
        pid = path.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or proc_stats_of(int(pid)) is not None:
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


def proc_stats() -> dict[int, list[str]]:
    """The fields after the command name of /proc/<pid>/stat, for every process."""
    out: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stats_of(int(entry.name))
            if fields is not None:
                out[int(entry.name)] = fields
    return out


def _process_groups() -> dict[int, int]:
    return {pid: int(fields[2]) for pid, fields in proc_stats().items()}


def descendants(pid: int) -> set[int]:
    """`pid` and every process below it in the parent tree, read from /proc."""
    children: dict[int, list[int]] = {}
    for child, fields in proc_stats().items():
        children.setdefault(int(fields[1]), []).append(child)
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
