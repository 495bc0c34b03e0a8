"""The fault driver: one trial is a job under load on the topology (pipelines_dev.
topology), one fault injected while records are in flight, and the job's output checked
record by record by readers that share nothing with the job.

A trial:
1. topics of its own (6 partitions in and out, a dead-letter topic), the job submitted
   detached (`pipelines-dev submit`), records produced by a thread at a steady rate;
2. a reader with read_committed follows the output from the start, noting when each
   record arrived;
3. once a checkpoint has completed and part of the output is there, the fault is injected
   (and healed: a container restarted, reconnected, unpaused);
4. when the output is complete (or the deadline passes) the job is cancelled and a second
   reader reads the whole output once more.

The checks (`Trial.check`): every input id in the output exactly once, the dead letters
exactly the malformed inputs by origin, per-key order kept (passthrough), every record
the live reader saw still in the final output at the same offset (a reader never saw an
aborted record), and the last stable offset at the log end (no transaction left open).

Waits are on conditions with deadlines, never sleeps tuned to a machine; the only fixed
times are the faults' own durations (a 30 s network cut is 30 s).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipelines.flink.jobmanager import JobManager
from pipelines.running.processes import until_stopped
from pipelines_dev.containers import DockerError, docker
from pipelines_dev.demo import demo_record
from pipelines_dev.kafka_broker import listed_transactions
from pipelines_dev.topics import create_topics, end_offsets, read_messages
from pipelines_dev.topology import BUCKET, LIBRDKAFKA_QUIET, TASKMANAGERS, Topology

log = logging.getLogger(__name__)

PYTHON = "/opt/venv/bin/python"
PARTITIONS = 6
KEYS = 60
CLI = [sys.executable, "-m", "pipelines_dev.commands"]


class ChaosError(Exception):
    """A trial could not run (not a finding about the job): the message says why."""


# ------------------------------------------------------------------ load and readers


def trial_values(job: str, count: int, bad_every: int) -> list[tuple[bytes, bytes | None]]:
    """(value, key) for each input record: ids 0..count-1; passthrough records carry a key
    and a per-key sequence (order is checked per key); enrich records every `bad_every`-th
    malformed (dead letters are checked by origin) and no key (round-robin, so each
    record's partition and offset are known)."""
    out: list[tuple[bytes, bytes | None]] = []
    for i in range(count):
        if job == "passthrough":
            key = f"k{i % KEYS}"
            out.append((json.dumps({"id": i, "key": key, "seq": i // KEYS}).encode(), key.encode()))
        elif bad_every and i % bad_every == bad_every - 1:
            out.append((b"{not json " + str(i).encode(), None))
        else:
            out.append((json.dumps(demo_record(i, 1_700_000_000_000 + i)).encode(), None))
    return out


class Producer(threading.Thread):
    """Produces the trial's records at `rate` per second (round-robin without keys, by key
    hash with them); `done` is set when all are acknowledged."""

    def __init__(self, bootstrap: str, topic: str, values, rate: float):
        super().__init__(daemon=True, name="chaos-producer")
        self.bootstrap, self.topic, self.values, self.rate = bootstrap, topic, values, rate
        self.error: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        producer = KafkaProducer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 600_000,  # a broker fault must not drop input
            },
            logger=LIBRDKAFKA_QUIET,  # a broker's absence is the point of the trial
        )
        failed: list = []

        def delivered(err, _msg) -> None:
            if err:
                failed.append(err)

        started = time.monotonic()
        for i, (value, key) in enumerate(self.values):
            due = started + i / self.rate
            while time.monotonic() < due:
                producer.poll(min(0.05, max(0.0, due - time.monotonic())))
            kwargs = {"key": key} if key is not None else {"partition": i % PARTITIONS}
            while True:
                try:
                    producer.produce(
                        self.topic,
                        value,
                        on_delivery=delivered,
                        **kwargs,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
        remaining = producer.flush(600)
        if failed or remaining:
            self.error = f"{len(failed)} failed, {remaining} not delivered: {failed[:1]}"
        self.done.set()


class LiveReader(threading.Thread):
    """Follows a topic with read_committed from its beginning, noting (partition, offset,
    value, arrival time) of each record."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True, name="chaos-reader")
        self.bootstrap, self.topic = bootstrap, topic
        self.seen: list[tuple[int, int, bytes, float]] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"chaos-live-{self.topic}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
            },
            logger=LIBRDKAFKA_QUIET,
        )
        consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        try:
            while not self.stop.is_set():
                for msg in consumer.consume(500, timeout=0.5):
                    if msg.error():
                        continue
                    with self.lock:
                        self.seen.append((msg.partition(), msg.offset(), msg.value(), time.time()))
        finally:
            consumer.close()

    def count(self) -> int:
        with self.lock:
            return len(self.seen)

    def arrivals_after(self, when: float) -> list[float]:
        with self.lock:
            return sorted(t for *_, t in self.seen if t > when)


# ------------------------------------------------------------------ faults


@dataclass
class Context:
    """What a fault acts on: the topology, the trial's job and topics."""

    topology: Topology
    job: str
    job_id: str
    names: dict[str, str]
    args: list[str]
    rng: random.Random
    log: list[str] = field(default_factory=list)
    output: Callable[[], int] = lambda: 0  # records read back so far

    def note(self, text: str) -> None:
        self.log.append(f"{time.strftime('%H:%M:%S')} {text}")
        log.info(f"chaos    {text}")

    @property
    def container(self):
        return self.topology.container


# A fault the engine refuses at once is common on a busy machine: runc's cgroup freezer
# gives up ("unable to freeze") while a process of the container is in uninterruptible
# I/O, as a broker is just after a restart, and a container still starting cannot be
# killed yet. Each docker action of a fault is applied again within this bound; a freeze
# past it is applied by SIGSTOP of every process of the container, a freeze as real.
FAULT_RETRY_S = 20.0


def retried(attempt: Callable[[], object], bound_s: float, pause_s: float = 1.0) -> list[str]:
    """Calls `attempt` until it returns, for at most `bound_s`; the errors of the failed
    calls, in order (empty when the first succeeded). The last error is raised when the
    bound passes."""
    errors: list[str] = []
    deadline = time.monotonic() + bound_s
    while True:
        try:
            attempt()
            return errors
        except DockerError as exc:
            errors.append(str(exc))
            if time.monotonic() + pause_s > deadline:
                raise
            time.sleep(pause_s)


def applied(ctx: Context, what: str, attempt: Callable[[], object]) -> None:
    """`attempt` (one docker action of a fault) within FAULT_RETRY_S; the trial's notes
    say when it was refused first, and a ChaosError names the reason when it never took."""
    try:
        refused = retried(attempt, FAULT_RETRY_S)
    except DockerError as exc:
        raise ChaosError(f"could not {what} within {FAULT_RETRY_S:.0f} s: {exc}") from None
    if refused:
        ctx.note(f"{what}: applied after {len(refused)} refused ({refused[-1]})")


def container_pids(name: str) -> list[int]:
    """Host pids of every process in container `name` (`docker top` reads its cgroup)."""
    out = docker("top", name, "-eo", "pid")
    return [int(line) for line in out.splitlines()[1:] if line.strip().isdigit()]


def signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass  # ended since it was listed


# How long SIGSTOP may take to stop every process of a container (each stops when next
# scheduled): past it the freeze is undone and reported as not applied.
STOP_WAIT_S = 30.0


@contextlib.contextmanager
def frozen(ctx: Context, role: str, seconds: float, retry_s: float = FAULT_RETRY_S):
    """`role`'s container frozen for the body: `docker pause` (again within `retry_s` when
    the runtime refuses; a negative `retry_s` skips it), else SIGSTOP of its processes. The
    note says which; thawed the same way on every exit. A freeze neither way can apply is a
    ChaosError naming both reasons, never a finding about the data."""
    name = ctx.container(role)
    pids: list[int] = []
    try:
        if retry_s < 0:
            raise DockerError("skipped: the signal path was asked for")
        refused = retried(lambda: docker("pause", name), retry_s)
        how = "docker pause" + (f", after {len(refused)} refused: {refused[-1]}" if refused else "")
    except DockerError as paused:
        try:
            pids = container_pids(name)
            if not pids:
                raise DockerError(f"`docker top {name}` lists no process")
            signal_all(pids, signal.SIGSTOP)
            if not until_stopped(pids, STOP_WAIT_S):  # the body runs on a frozen broker only
                signal_all(pids, signal.SIGCONT)
                raise DockerError(f"not every process stopped within {STOP_WAIT_S:.0f} s")
        except (DockerError, OSError) as stopped:
            raise ChaosError(f"{role} could not be frozen: {paused}; SIGSTOP: {stopped}") from None
        how = f"SIGSTOP of its {len(pids)} processes (docker pause refused: {paused})"
    ctx.note(f"{role} paused for {seconds:.0f} s by {how}")
    try:
        yield
    finally:
        if pids:
            signal_all(pids, signal.SIGCONT)
        else:
            applied(ctx, f"unpause {role}", lambda: docker("unpause", name))
        ctx.note(f"{role} unpaused")


def _restart(ctx: Context, role: str, signal: str = "KILL") -> None:
    applied(ctx, f"kill {role}", lambda: docker("kill", "--signal", signal, ctx.container(role)))
    ctx.note(f"{role} killed ({signal})")
    applied(ctx, f"start {role}", lambda: docker("start", ctx.container(role)))
    ctx.note(f"{role} started again")


def _wait_brokers(ctx: Context, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while (problem := ctx.topology.brokers_in_sync()) is not None:
        if time.monotonic() > deadline:
            raise ChaosError(f"brokers not back in sync within {timeout_s:.0f} s: {problem}")
        time.sleep(1)


def wait_taskmanagers(ctx: Context, gone: tuple[str, ...] = (), timeout_s: float = 240) -> None:
    """Until every TaskManager is registered and none of `gone` (ids of a killed one, which
    the JobManager lists until it notices) is among them: the restarted one is back."""
    deadline = time.monotonic() + timeout_s
    while True:
        ids = ctx.topology.taskmanager_ids()
        if ids is not None and len(ids) == TASKMANAGERS and not set(gone) & set(ids):
            return
        if time.monotonic() > deadline:
            raise ChaosError(
                f"{TASKMANAGERS} TaskManagers not registered within {timeout_s:.0f} s "
                f"(registered: {ids}, killed: {list(gone)})"
            )
        time.sleep(1)


def taskmanager_kill(ctx: Context) -> None:
    role = ctx.rng.choice(["taskmanager-1", "taskmanager-2"])
    killed = tuple(i for i in ctx.topology.taskmanager_ids() or [] if i.startswith(f"{role}:"))
    _restart(ctx, role)
    wait_taskmanagers(ctx, gone=killed)
    ctx.note(f"{role} registered again")


def taskmanager_partition(ctx: Context, seconds: float = 30) -> None:
    role = ctx.rng.choice(["taskmanager-1", "taskmanager-2"])
    net = ctx.topology.name
    applied(ctx, f"cut {role} off",
            lambda: docker("network", "disconnect", "--force", net, ctx.container(role)))  # fmt: skip
    ctx.note(f"{role} cut off from the network for {seconds:.0f} s")
    time.sleep(seconds)  # the fault's own length
    applied(ctx, f"reconnect {role}",
            lambda: docker("network", "connect", "--alias", role, net, ctx.container(role)))  # fmt: skip
    ctx.note(f"{role} reconnected")
    wait_taskmanagers(ctx)


def jobmanager_kill(ctx: Context) -> None:
    """SIGKILL of the JobManager and a start of the same container: ZooKeeper HA keeps the
    job graph and the checkpoint pointer, so the new process recovers the same job id from
    a checkpoint at least as new as the last one the old process reported complete."""
    before = (_latest(ctx.topology, ctx.job_id, "completed") or {}).get("id")
    _restart(ctx, "jobmanager")
    restored = _wait_for(lambda: _restored(ctx.topology, ctx.job_id), 300,
                         f"job {ctx.job_id} running again, restored by the new JobManager")  # fmt: skip
    if restored["is_savepoint"] or (before is not None and restored["id"] < before):
        raise ChaosError(
            f"the new JobManager restored {restored} while checkpoint {before} had completed"
        )
    ctx.note(
        f"job {ctx.job_id} recovered by the new JobManager from checkpoint {restored['id']} "
        f"(the latest completed before the kill: {before})"
    )


def _leader_of(ctx: Context, topic: str, partition: int = 0) -> str:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": ctx.topology.bootstrap}).list_topics(timeout=10)
    return f"kafka-{meta.topics[topic].partitions[partition].leader}"


def sink_leader_kill(ctx: Context) -> None:
    role = _leader_of(ctx, ctx.names["out"], ctx.rng.randrange(PARTITIONS))
    ctx.note(f"{role} leads a partition of the sink topic")
    _restart(ctx, role)
    _wait_brokers(ctx)


def open_transactions(ctx: Context) -> dict[str, int]:
    """Transactional id -> coordinator broker id, for the trial's sink transactions open
    now (Kafka's own kafka-transactions tool, as `pipelines-dev kafka transactions` runs it)."""
    proc = _run_cli("kafka", "transactions", "--job", ctx.job, *ctx.args, "list", timeout=120)
    return {
        row.transactional_id: row.coordinator
        for row in listed_transactions(proc.stdout)
        if row.transactional_id.startswith(ctx.names["tx"]) and row.state == "Ongoing"
    }


def coordinator_kill(ctx: Context) -> None:
    """The broker coordinating one of the sink's open transactions, killed and restarted:
    its transaction log partitions move to another broker mid-transaction."""
    deadline = time.monotonic() + 60
    found: dict[str, int] = {}
    while not found and time.monotonic() < deadline:
        found = open_transactions(ctx)
    if not found:
        raise ChaosError("no open transaction of the sink found within 60 s")
    tid = ctx.rng.choice(sorted(found))
    role = f"kafka-{found[tid]}"
    ctx.note(f"{role} coordinates {tid}")
    _restart(ctx, role)
    _wait_brokers(ctx)


def broker_pause(ctx: Context, seconds: float = 20) -> None:
    role = _leader_of(ctx, ctx.names["out"], ctx.rng.randrange(PARTITIONS))
    with frozen(ctx, role, seconds):
        time.sleep(seconds)  # the fault's own length
    _wait_brokers(ctx)


def rolling_restart(ctx: Context) -> None:
    for i in (1, 2, 3):
        role = f"kafka-{i}"
        docker("stop", "-t", "60", ctx.container(role), timeout=120)
        ctx.note(f"{role} stopped (SIGTERM)")
        applied(ctx, f"start {role}", lambda: docker("start", ctx.container(role)))
        ctx.note(f"{role} started")
        _wait_brokers(ctx)


def store_outage(ctx: Context, seconds: float = 20) -> None:
    with frozen(ctx, "seaweedfs", seconds):
        time.sleep(seconds)  # the fault's own length


FAULTS = {
    "taskmanager-kill": taskmanager_kill,
    "taskmanager-partition": taskmanager_partition,
    "jobmanager-kill": jobmanager_kill,
    "sink-leader-kill": sink_leader_kill,
    "coordinator-kill": coordinator_kill,
    "broker-pause": broker_pause,
    "rolling-restart": rolling_restart,
    "store-outage": store_outage,
}
# Faults the seeded combination draws from (each heals before the next).
COMBINABLE = ["taskmanager-kill", "jobmanager-kill", "sink-leader-kill", "broker-pause"]


# ------------------------------------------------------------------ a trial


@dataclass
class Result:
    job: str
    fault: str
    trial: int
    seed: int
    records: int
    output: int = 0
    distinct: int = 0
    lost: int = 0
    duplicated: int = 0
    dead_letters: int = 0
    dead_letters_expected: int = 0
    order_violations: int = 0
    aborted_reads: int = 0
    open_transactions: bool = False
    recovery_s: float | None = None
    max_gap_s: float | None = None
    duration_s: float = 0.0
    restarts: int = 0
    # Containers whose process ended by itself during the trial and that Docker's restart
    # policy started again (role -> times): no fault does that, so each is a finding.
    exited: dict[str, int] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    error: str | None = None
    kept: str | None = None  # where a failed trial's logs and job state were written

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and self.lost == 0
            and self.duplicated == 0
            and self.order_violations == 0
            and self.aborted_reads == 0
            and self.dead_letters == self.dead_letters_expected
            and not self.open_transactions
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def _run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`pipelines ARGS` in a session of its own, ended whole (its `flink run` JVM included)
    if it outlives `timeout`."""
    proc = subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise ChaosError(f"pipelines {' '.join(args[:2])}: no answer within {timeout:.0f} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever it left behind
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = _run_cli(*args, timeout=timeout)
    if proc.returncode != 0:
        raise ChaosError(
            f"pipelines {' '.join(args[:2])} exited {proc.returncode}: "
            f"{(proc.stdout + proc.stderr).strip()[-800:]}"
        )
    return proc


def _submit(topology: Topology, job: str, args: list[str]) -> str:
    proc = _cli("submit", job, "--jobmanager", topology.jobmanager, "--python", PYTHON,
                *args, "--detached")  # fmt: skip
    found = re.search(r"Job has been submitted with JobID ([0-9a-f]{32})", proc.stdout)
    if not found:
        raise ChaosError(f"submit printed no job id: {proc.stdout[-500:]}")
    return found.group(1)


def _rest(topology: Topology, path: str):
    return JobManager(topology.jobmanager)._call(path)


def _job_state(topology: Topology, job_id: str) -> str | None:
    """The job's state, or None while no JobManager answers (one failing over)."""
    try:
        return _rest(topology, f"/jobs/{job_id}")["state"]
    except Exception:  # noqa: BLE001 - JobManagerError, or a half-started JobManager's 404
        return None


TERMINAL = {"FAILED", "CANCELED", "FINISHED"}


def _recovered_since(topology: Topology, job_id: str, since: float) -> bool:
    """Running, with a checkpoint acknowledged after `since` (epoch seconds: the containers
    share this host's clock); a job that ended is a finding at once."""
    state = _job_state(topology, job_id)
    if state in TERMINAL:
        raise ChaosError(f"the job is {state} after the fault")
    if state != "RUNNING":
        return False
    latest = _latest(topology, job_id, "completed")
    return latest is not None and latest["latest_ack_timestamp"] / 1000 > since


def _latest(topology: Topology, job_id: str, kind: str) -> dict | None:
    """The job's latest `kind` checkpoint ("completed", "restored") as its JobManager
    reports it; None when there is none, and while no JobManager answers (one failing over)."""
    try:
        return _rest(topology, f"/jobs/{job_id}/checkpoints")["latest"][kind] or None
    except Exception:  # noqa: BLE001 - a JobManager failing over answers nothing
        return None


def _restored(topology: Topology, job_id: str) -> dict | None:
    """The checkpoint the running job was last restored from; None until it is running
    with one (and while no JobManager answers)."""
    if _job_state(topology, job_id) != "RUNNING":
        return None
    return _latest(topology, job_id, "restored")


def _checkpoints_completed(topology: Topology, job_id: str) -> int:
    try:
        return _rest(topology, f"/jobs/{job_id}/checkpoints")["counts"]["completed"]
    except Exception:  # noqa: BLE001 - a JobManager failing over answers nothing
        return 0


def rescale(ctx: Context) -> None:
    """4 -> 2 -> 4 by savepoint while records arrive; after the downscale the last stable
    offset must reach the log end (no transaction of the larger job left open). Each
    savepoint must be in the object store, and each resumed job reads with a group that
    never committed and fallback `fail`: only the savepoint can give it positions."""
    for step, parallelism in enumerate((2, 4)):
        stop = _cli("jobs", "stop", ctx.job_id, "--jobmanager", ctx.topology.jobmanager)
        written = re.search(r"savepoint written to (\S+)", stop.stdout)
        if written is None:
            raise RuntimeError(f"no savepoint path in `jobs stop`'s output: {stop.stdout!r}")
        savepoint = written.group(1)
        _in_the_store(ctx, savepoint)
        ctx.note(f"stopped with a savepoint {savepoint}")
        sets = [v for k, v in zip(ctx.args[::2], ctx.args[1::2]) if k == "--set"]
        sets = [v for v in sets if not v.startswith(("job.parallelism=", "source.group_id="))]
        sets += [
            f"job.parallelism={parallelism}",
            f"source.group_id={ctx.names['group']}-never-committed-{step}",
            "source.start.mode=group-offsets",
            "source.start.fallback=fail",
        ]
        args = [a for v in sets for a in ("--set", v)] + ["--from-checkpoint", savepoint]
        ctx.job_id = _submit(ctx.topology, ctx.job, args)
        ctx.note(f"resumed at parallelism {parallelism} as {ctx.job_id}")
        # Checked at its first restore: until its first checkpoint, a failover restores
        # the savepoint again, later ones restore that checkpoint.
        restored = _wait_for(lambda: _restored(ctx.topology, ctx.job_id), 240,
                             "the resumed job running, restored")  # fmt: skip
        _resumed_as_asked(ctx, savepoint, restored, parallelism)
        _wait_for(lambda: _checkpoints_completed(ctx.topology, ctx.job_id) >= 1, 240,
                  "a checkpoint after the rescale")  # fmt: skip
        if parallelism == 2:  # a downscale: nothing may hold back read_committed readers
            out = ctx.names["out"]
            bootstrap = ctx.topology.bootstrap
            _wait_for(
                lambda: (
                    end_offsets(bootstrap, out, "read_committed") == end_offsets(bootstrap, out)
                    or None
                ),
                120,
                "the last stable offset at the log end after the downscale",
            )


def _in_the_store(ctx: Context, savepoint: str) -> None:
    prefix = f"s3://{BUCKET}/"
    key = savepoint.removeprefix(prefix).rstrip("/") + "/_metadata"
    if not savepoint.startswith(f"{prefix}savepoints/{ctx.job}/"):
        raise ChaosError(f"the savepoint {savepoint} is not under {prefix}savepoints/{ctx.job}/")
    if key not in ctx.topology.s3().keys(BUCKET, key):
        raise ChaosError(f"the object store has no {key} for the savepoint {savepoint}")


def _resumed_as_asked(ctx: Context, savepoint: str, restored: dict, parallelism: int) -> None:
    widths = {v["parallelism"] for v in _rest(ctx.topology, f"/jobs/{ctx.job_id}")["vertices"]}
    if widths != {parallelism}:
        raise ChaosError(f"resumed at parallelism {parallelism}, runs at {sorted(widths)}")
    if restored["external_path"].rstrip("/") != savepoint.rstrip("/"):
        raise ChaosError(f"resumed from {savepoint}, restored from {restored}")


def combination(ctx: Context) -> None:
    """Three faults drawn with the trial's seed, each after a checkpoint completed since
    the previous one."""
    for name in ctx.rng.sample(COMBINABLE, 3):
        before = _checkpoints_completed(ctx.topology, ctx.job_id)
        _wait_for(lambda: _checkpoints_completed(ctx.topology, ctx.job_id) > before, 240,
                  "a checkpoint since the last fault")  # fmt: skip
        ctx.note(f"combination: {name} at output {ctx.output()}")
        FAULTS[name](ctx)


ALL_FAULTS = {**FAULTS, "rescale": rescale, "combination": combination}


def _wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise ChaosError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(1)


def run_trial(
    topology: Topology,
    job: str,
    fault: str,
    records: int,
    seed: int,
    trial: int = 1,
    rate: float = 1500.0,
    bad_every: int = 500,
    deadline_s: float = 900,
    keep_dir: Path | None = None,
) -> Result:
    """One trial; a Result whatever happens (`error` says what stopped it). A trial that
    fails writes every container's log and the job's state (checkpoints, exceptions, as the
    JobManager had them before the job was cancelled) under `keep_dir`: a stall seen once
    in ten runs is understood from what it left, not from a rerun."""
    started = time.monotonic()
    tag = f"chaos-{job}-{fault}-{trial}-{seed}-{uuid.uuid4().hex[:6]}"  # topics of its own
    names = {k: f"{tag}-{k}" for k in ("in", "out", "dlq", "group", "tx")}
    values = trial_values(job, records, bad_every)
    expected_dead = sorted(
        (i % PARTITIONS, i // PARTITIONS)
        for i, (v, _) in enumerate(values)
        if v.startswith(b"{not")
    )
    result = Result(job, fault, trial, seed, records, dead_letters_expected=len(expected_dead))
    bootstrap = topology.bootstrap
    problems = topology.wait_ready()
    if problems:  # a trial on a broken cluster would only measure the previous one's damage
        result.error = f"the topology was not ready before the trial: {'; '.join(problems)}"
        return result
    create_topics(bootstrap, {names["in"]: PARTITIONS, names["out"]: PARTITIONS, names["dlq"]: 1})
    sets = [
        *topology.job_sets(job),
        f"source.topics=[{names['in']}]",
        f"source.group_id={names['group']}",
        f"sink.topic={names['out']}",
        f"sink.transactional_id_prefix={names['tx']}",
        f"sink.dead_letter_topic={names['dlq']}",
        "checkpoint.interval=2s",
        "job.parallelism=4",
        "restart.attempts=1000",
    ]
    args = [a for item in sets for a in ("--set", item)]
    producer = Producer(bootstrap, names["in"], values, rate)
    reader = LiveReader(bootstrap, names["out"])
    ctx = Context(topology, job, "", names, args, random.Random(seed), output=reader.count)
    job_state: dict[str, object] = {}
    counts_before = topology.restart_counts()
    try:
        ctx.job_id = _submit(topology, job, args)
        ctx.note(f"{job} submitted as {ctx.job_id}")
        reader.start()
        producer.start()
        valid = records - len(expected_dead)
        _wait_for(
            lambda: (
                _checkpoints_completed(topology, ctx.job_id) >= 1 and reader.count() >= valid // 5
            ),
            300,
            "a checkpoint and a fifth of the output before the fault",
        )
        injected = time.time()
        ctx.note(f"injecting {fault} at output {reader.count()} of {valid}")
        ALL_FAULTS[fault](ctx)
        healed = time.time()
        ctx.note(f"{fault} healed")
        _wait_for(lambda: reader.count() >= valid, deadline_s, "the whole output")
        # Recovery: from the injection until output resumed after its longest stall (a
        # checkpoint's commit right after the injection is not a recovery).
        arrivals = reader.arrivals_after(injected)
        gaps = [(b - a, b) for a, b in zip([injected, *arrivals], arrivals)]
        if gaps:
            gap, resumed = max(gaps)
            result.max_gap_s, result.recovery_s = round(gap, 1), round(resumed - injected, 1)
        ctx.note(f"output complete; healed {healed - injected:.1f} s after the injection")
        # The output can be complete while the job still recovers from a fault that came
        # after the last record (a TaskManager killed near the end): recovered means running
        # again and a checkpoint completed since the fault healed.
        _wait_for(lambda: _recovered_since(topology, ctx.job_id, healed), 300,
                  "the job running with a checkpoint completed after the fault")  # fmt: skip
        result.restarts = _restarts(topology, ctx.job_id)
    except Exception as exc:  # noqa: BLE001 - one trial's surprise is a finding, not the end
        result.error = (
            f"{type(exc).__name__}: {exc}" if not isinstance(exc, ChaosError) else str(exc)
        )
        if ctx.job_id:
            result.restarts = _restarts(topology, ctx.job_id)
            job_state = _job_evidence(topology, ctx.job_id)
    finally:
        # Only what started: a submission that failed started neither, and joining the
        # reader then raised over the trial's own error (and `done` was waited 10 minutes).
        if producer.ident is not None:
            producer.done.wait(timeout=600)
        reader.stop.set()
        if reader.ident is not None:
            reader.join(timeout=30)
        if ctx.job_id:
            try:
                _run_cli(
                    "jobs", "cancel", ctx.job_id, "--jobmanager", topology.jobmanager, timeout=120
                )
            except ChaosError as exc:
                result.error = result.error or str(exc)
        if producer.error and not result.error:
            result.error = f"producing the input: {producer.error}"
        result.exited = exited_by_themselves(ctx, counts_before)
    _check(result, topology, job, names, values, expected_dead, reader)
    result.events = ctx.log
    if keep_dir is not None and not result.ok:
        result.kept = str(_keep_evidence(topology, keep_dir / tag, job_state, result))
    result.duration_s = round(time.monotonic() - started, 1)
    return result


def _job_evidence(topology: Topology, job_id: str) -> dict[str, object]:
    """What the JobManager says of the job: its state, checkpoints and exceptions."""
    found: dict[str, object] = {}
    for what in ("", "/checkpoints", "/exceptions"):
        try:
            found[f"/jobs/{job_id}{what}"] = _rest(topology, f"/jobs/{job_id}{what}")
        except Exception as exc:  # noqa: BLE001 - evidence of a failure: keep what answers
            found[f"/jobs/{job_id}{what}"] = f"not answered: {exc}"
    return found


def _keep_evidence(topology: Topology, out: Path, job_state: dict, result: Result) -> Path:
    topology.keep_logs(out)
    (out / "job.json").write_text(json.dumps(job_state, indent=1, default=str))
    (out / "events.txt").write_text("\n".join([*result.events, f"error: {result.error}"]) + "\n")
    return out


def fatal_cause(log_text: str) -> str:
    """The last fatal line of a Flink process's log with the deepest cause of the stack
    trace under it ("Fatal error ... | Caused by: ...InvalidPidMappingException: ...")."""
    lines = log_text.splitlines()
    fatal = [i for i, line in enumerate(lines) if "FATAL" in line or "Fatal error" in line]
    if not fatal:
        return "no fatal line in its log"
    below = lines[fatal[-1] + 1 : fatal[-1] + 300]
    causes = [line.strip() for line in below if line.strip().startswith("Caused by:")]
    first = next((line.strip() for line in below if "Exception" in line or "Error" in line), "")
    return " | ".join(
        x[:300] for x in (lines[fatal[-1]].strip(), causes[-1] if causes else first) if x
    )


def exited_by_themselves(ctx: Context, before: dict[str, int]) -> dict[str, int]:
    """Containers Docker restarted since `before` (role -> times), each noted with the
    fatal line of its log: a Flink process that ended itself is shown, not hidden by the
    restart that let the trial go on."""
    exited = {}
    for role, count in ctx.topology.restart_counts().items():
        if count > before.get(role, 0):
            exited[role] = count - before.get(role, 0)
            why = fatal_cause(ctx.topology.logs(role, 5000))
            ctx.note(
                f"{role} exited by itself {exited[role]} time(s) and its restart policy "
                f"started it again; its log: {why}"
            )
    return exited


def _restarts(topology: Topology, job_id: str) -> int:
    """How often Flink restarted the job: its numRestarts metric, or, when the JobManager
    does not report it (a job in RESTARTING), how often it was restored from a
    checkpoint."""
    try:
        found = _rest(topology, f"/jobs/{job_id}/metrics?get=numRestarts")
        if found:
            return int(float(found[0]["value"]))
    except Exception:  # noqa: BLE001 - not reported: the checkpoint counts say it too
        pass
    try:
        return int(_rest(topology, f"/jobs/{job_id}/checkpoints")["counts"]["restored"])
    except Exception:  # noqa: BLE001 - the job is gone: nothing to count
        return 0


def _check(result: Result, topology: Topology, job: str, names, values, expected_dead, reader):
    """The independent reader's checks, against the input this trial produced."""
    bootstrap = topology.bootstrap
    try:
        final = read_messages(bootstrap, names["out"], timeout_s=120)
        dead = read_messages(bootstrap, names["dlq"], timeout_s=120)
    except Exception as exc:  # noqa: BLE001 - a read that cannot finish is a finding
        result.error = result.error or f"reading the output back: {exc}"
        return
    ids: Counter[int] = Counter()
    by_offset: dict[tuple[int, int], bytes] = {}
    for m in final:
        record = json.loads(m.value())
        ids[record["id"]] += 1
        by_offset[(m.partition(), m.offset())] = m.value()
    wanted = {json.loads(v)["id"] for v, _ in values if not v.startswith(b"{not")}
    result.output = sum(ids.values())
    result.distinct = len(ids)
    result.lost = len(wanted - set(ids))
    result.duplicated = sum(n - 1 for n in ids.values() if n > 1) + len(set(ids) - wanted)
    result.dead_letters = len(dead)
    origins = sorted((json.loads(d.value())["origin"]["partition"],
                      json.loads(d.value())["origin"]["offset"]) for d in dead)  # fmt: skip
    if origins != expected_dead:
        result.dead_letters = -abs(len(dead))  # counts equal but origins differ: not exact
    if job == "passthrough":
        last: dict[str, int] = {}
        for m in sorted(final, key=lambda m: (m.partition(), m.offset())):
            record = json.loads(m.value())
            if record["seq"] <= last.get(record["key"], -1):
                result.order_violations += 1
            last[record["key"]] = record["seq"]
    with reader.lock:
        result.aborted_reads = sum(1 for p, o, v, _ in reader.seen if by_offset.get((p, o)) != v)
    stable = end_offsets(bootstrap, names["out"], "read_committed")
    result.open_transactions = stable != end_offsets(bootstrap, names["out"])
