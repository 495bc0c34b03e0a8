"""What tests (and the tests `pipelines-dev new` generates) use to run the project as a user does.

Every process a test starts gets a session of its own, so the harness can find and end
everything it spawned (the CLI, its mini-cluster JVM, Flink's Python workers) without
trusting the code under test to do it: one failing or hanging test never leaves work
behind for the next. A wait that runs out prints the process's own output.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipelines.cli import DEVELOPER_COMMANDS
from pipelines.running.processes import command_line, descendants, listening, snapshot

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "pipelines_dev.commands"]  # what `pipelines-dev` runs
JOB_CLI = [sys.executable, "-m", "pipelines.cli"]  # what `pipelines` runs: the job commands
PROGRESS = re.compile(r"checkpoints (\d+) completed, (\d+) failed")


def job_env(extra: dict | None = None) -> dict:
    """The environment for job processes: this checkout's `pipelines` first on the path,
    for the CLI and for the Python workers Flink starts from it."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}:{path}" if path else str(ROOT), **(extra or {})}


def topic_args(
    kafka: str,
    names,
    *,
    out: str = "out",
    tx_suffix: str = "",
    dead_letters: bool = False,
    late: bool = False,
) -> list[str]:
    """The `--set` arguments that point a job at this test's broker, topics, group and
    transactional id prefix (each named by the `names` fixture: in, out, group, tx, dlq, late)."""
    sets = [
        f"kafka.bootstrap_servers={kafka}",
        f"source.topics=[{names('in')}]",
        f"source.group_id={names('group')}",
        f"sink.topic={names(out)}",
        f"sink.transactional_id_prefix={names('tx')}{tx_suffix}",
    ]
    if dead_letters:
        sets.append(f"sink.dead_letter_topic={names('dlq')}")
    if late:
        sets.append(f"window.late_topic={names('late')}")
    return [arg for item in sets for arg in ("--set", item)]


# ------------------------------------------------------------------ process trees


def cmdline(pid: int) -> str:
    return command_line(pid).strip()


def process_tree(pid: int) -> dict[int, tuple[str, str]]:
    """Everything a run started: `pid`'s descendants, the members of their process groups
    and sessions (orphans keep those), as {pid: (start time, command line)}."""
    found = descendants(pid)
    stats = snapshot()
    groups = {stats[p].pgid for p in found if p in stats}
    sessions = {stats[p].sid for p in found if p in stats} - {os.getsid(0)}
    found |= {p for p, f in stats.items() if f.pgid in groups or f.sid in sessions}
    return {p: (str(stats[p].started), cmdline(p)) for p in found if p in stats}


def still_alive(tree: dict[int, tuple[str, str]]) -> dict[int, str]:
    """The processes of an earlier `process_tree` snapshot still running (same start time;
    a zombie has ended and only waits for its parent to read its status)."""
    stats = snapshot()
    return {
        p: cmd
        for p, (start, cmd) in tree.items()
        if p in stats and str(stats[p].started) == start and not stats[p].zombie
    }


def wait_gone(tree: dict[int, tuple[str, str]], timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    left = still_alive(tree)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        reap_orphans(tree)
        left = still_alive(tree)
    reap_orphans(tree)
    return left


def become_subreaper() -> None:
    """Orphans of what tests start are re-parented to this process, not to PID 1 (which in
    a container may never reap them: killed JVMs would linger as <defunct>)."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def reap_orphans(pids) -> None:
    """Collect the exit status of ended orphans re-parented to us (never our own Popens,
    whose status subprocess must read)."""
    own = {started.proc.pid for started in LIVE}
    for pid in pids:
        if pid not in own:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def kill_tree(pid: int) -> None:
    """SIGKILL every process of `pid`'s tree, groups and sessions (the harness's backstop)."""
    for _ in range(3):  # a dying parent may still start a child: sweep again
        tree = process_tree(pid)
        for member in tree:
            try:
                os.kill(member, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        left = wait_gone(tree, 10)
        reap_orphans(tree)
        if not left:
            return


def orphaned_flink_processes() -> dict[int, str]:
    """Flink Python workers and gateway JVMs of this checkout whose parent is gone
    (re-parented to PID 1 or to this test session): what leaked. A cluster's daemons are
    not counted: a developer's own `make cluster-up` cluster looks just like that."""
    me = os.getpid()
    markers = ("pyflink-udf-runner", "beam_boot", "PythonGatewayServer")
    stats = snapshot()

    def leader_gone(pgid: int) -> bool:
        return pgid not in stats or stats[pgid].zombie

    out = {}
    for pid, p in stats.items():
        # Re-parented (to PID 1, or to this session as subreaper) and its group's leader (the
        # JVM or script that started it) gone: an orphan, not a child the session started.
        if p.zombie or p.ppid not in (1, me) or not leader_gone(p.pgid):
            continue
        cmd = cmdline(pid)
        if str(ROOT) in cmd and any(marker in cmd for marker in markers):
            out[pid] = cmd[:200]
    return out


# ------------------------------------------------------------------ the CLI as a user runs it

LIVE: list["Started"] = []


class Started:
    """A subprocess in a session of its own, its output collected, ended by the harness."""

    def __init__(
        self,
        args: list[str],
        env: dict | None = None,
        sigint_ignored: bool = False,
        cwd: Path = ROOT,
        separate_stderr: bool = False,
    ):
        def preexec():
            # As a CI runner or `cmd &` in a script starts it: SIGINT ignored.
            if sigint_ignored:
                signal.signal(signal.SIGINT, signal.SIG_IGN)

        self.args = args
        self.proc = subprocess.Popen(
            args,
            cwd=cwd,
            stdout=subprocess.PIPE,
            text=True,
            env=job_env(env),
            stderr=subprocess.PIPE if separate_stderr else subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
        )
        self.lines: list[str] = []
        self.error_lines: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True)
        ]
        if separate_stderr:
            self._readers.append(
                threading.Thread(
                    target=self._read, args=(self.proc.stderr, self.error_lines), daemon=True
                )
            )
        for reader in self._readers:
            reader.start()
        LIVE.append(self)

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines + self.error_lines)

    def tree(self) -> dict[int, tuple[str, str]]:
        return process_tree(self.proc.pid)

    def wait(self, timeout: float = 300) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.end()
            raise AssertionError(
                f"{' '.join(self.args[2:])} still running after {timeout:.0f} s; "
                f"its output:\n{self.output[-6000:]}"
            ) from None
        for reader in self._readers:
            reader.join(timeout=10)
        return code

    def end(self) -> None:
        """End it and everything it started, whatever state it is in."""
        kill_tree(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for reader in self._readers:
            reader.join(timeout=5)


def end_all_started() -> list[str]:
    """End what tests started and left running; return a line for each (for the report)."""
    leftovers = []
    while LIVE:
        started = LIVE.pop()
        if started.proc.poll() is None or still_alive(started.tree()):
            tail = "\n    ".join(started.output.splitlines()[-15:])
            leftovers.append(f"{' '.join(started.args[2:4])}; its last output:\n    {tail}")
            started.end()
    return leftovers


def run_python(script: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter of this checkout, its output captured: for what must
    start from nothing (a gateway JVM, a process killed with no handler of ours)."""
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=job_env(),
        timeout=timeout,
    )


def cli_for(args) -> list[str]:
    """The command a user types for these arguments: `pipelines-dev` for a developer
    command, `pipelines` for a job command."""
    return CLI if args and args[0] in DEVELOPER_COMMANDS else JOB_CLI


def run_cli(
    *args: str, timeout: float = 300, env: dict | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """Run `pipelines ...` (a job command) or `pipelines-dev ...` (a developer command) as a
    user would, in a session of its own; on timeout its whole tree is ended and its output
    is part of the failure."""
    started = Started([*cli_for(args), *args], env=env, separate_stderr=True)
    code = started.wait(timeout)
    LIVE.remove(started)
    out, err = (
        "".join(line + "\n" for line in lines) for lines in (started.lines, started.error_lines)
    )
    if check and code != 0:
        raise AssertionError(
            f"pipelines {' '.join(args)} exited {code}\n"
            f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
        )
    return subprocess.CompletedProcess(started.args, code, out, err)


# ------------------------------------------------------------------ listening sockets


def listening_sockets(pids) -> dict[str, int]:
    """{"address|port": pid} of every TCP socket in LISTEN state held by one of `pids`."""
    return listening(pids)


def not_loopback(listeners: dict[str, int]) -> dict[str, str]:
    """The listeners bound to anything but a loopback address, with their owner's command."""
    import ipaddress

    bad = {}
    for key, pid in listeners.items():
        address = ipaddress.ip_address(key.split("|")[0])
        mapped = getattr(address, "ipv4_mapped", None)
        if not (address.is_loopback or (mapped is not None and mapped.is_loopback)):
            bad[key] = cmdline(pid)[:160]
    return bad


# ------------------------------------------------------------------ read-back


def restored_state_only(names) -> list[str]:
    """`--set` arguments for a resumed run that can read only from restored state: a group
    that never committed, in group-offsets mode, with fallback `fail`. Output then proves
    the restore (the earlier run's group would give exactly-once output by itself)."""
    sets = [
        f"source.group_id={names('never-committed')}",
        "source.start.mode=group-offsets",
        "source.start.fallback=fail",
    ]
    return [arg for item in sets for arg in ("--set", item)]


def every_partition_committed(kafka, group: str, topic: str) -> bool:
    """Every partition of `topic` has a committed position for `group`: a checkpoint taken
    from now on holds a read position for each split. (A split not yet read keeps "the
    group's committed offset" as its start, so a restore would ask the group: with a group
    that never committed and a failing fallback, that restore fails, as it should.)"""
    from pipelines_dev.topics import committed_offsets

    return all(o > 0 for o in committed_offsets(kafka, group, topic).values())


def wait_until(condition, timeout: float, what: str, every: float = 0.5):
    """Poll `condition` until it returns something true (returned) or `timeout` runs out
    (an AssertionError naming `what`): a wait on a condition, never a tuned sleep."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def committed_count(kafka, topic: str) -> int:
    """Records a `read_committed` reader of `topic` sees now (read, not the sum of last
    stable offsets: those count transaction markers and aborted records too)."""
    from pipelines_dev.topics import read_all

    return len(read_all(kafka, topic))


def assert_nothing_committed(kafka, topic: str) -> None:
    """No record committed to `topic`, and no transaction left open on it: the read (which
    raises unless every partition reported its end) finds nothing, and each partition's
    last stable offset is its log end."""
    from pipelines_dev.topics import end_offsets, read_all

    assert read_all(kafka, topic) == [], f"{topic} holds committed records"
    stable, end = end_offsets(kafka, topic, "read_committed"), end_offsets(kafka, topic)
    assert stable == end, f"{topic}: a transaction is open (last stable {stable}, log end {end})"


def assert_dead_letters_are(
    dead: list[bytes | str], topic: str, values: list[bytes], partitions: int
):
    """The dead letters are exactly the malformed `values` (those that are not demo records
    with an id), each once, by origin: `produce` put value i round-robin at partition
    i % partitions, offset i // partitions, so where each bad value sits is known without
    the code under test. Each dead letter also carries that value's original bytes."""
    import base64
    import json

    expected = sorted(
        ((i % partitions, i // partitions), v)
        for i, v in enumerate(values)
        if not v.startswith(b'{"id"')
    )
    messages = [json.loads(d) for d in dead]
    assert {m["origin"]["topic"] for m in messages} <= {topic}, messages[:3]
    got = sorted(
        ((m["origin"]["partition"], m["origin"]["offset"]), base64.b64decode(m["value_b64"]))
        for m in messages
    )
    assert got == expected, (
        f"dead letters by (partition, offset): {len(got)} read, {len(expected)} expected; "
        f"extra {sorted(set(got) - set(expected))[:5]}, missing {sorted(set(expected) - set(got))[:5]}"
    )
