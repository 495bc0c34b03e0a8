"""`make bench`: this project's jobs against the peer a user would pick instead, one run.

Every system reads the same pre-filled 3-partition topic of ~150-byte JSON records on the
same broker and writes exactly once; one observer notes when each record became visible
to read_committed readers (from the broker's last stable offsets, Observer) and reads
them all to check every id. A system's rate is the records that became visible after the
10% mark and by the 90% mark over the time between the two (span_rate: start-up and the
last commit are not counted); its start-up
is the time from launch to the first visible record, and its end-to-end rate is all the
records over the time from launch to the last one visible (start-up included: the figure
for a system that writes in bursts, such as Beam's bundles). A run ends when every record
is visible or BUDGET_S after the first one, whichever comes first: the inputs keep the jobs
busy for most of that, and a slower system is rated over what it wrote in the same time.
Systems alternate within each repetition (the order flips every repetition) so a slow
spell of the machine hits all of them. Every run must deliver every id exactly once (a run
cut by the budget: no id twice), or the table says what it got (the Beam pipeline writes
at least once; a clean run still has no duplicates).

Each run also counts the CPU its own processes, the broker's and the service's used per
million records over the same span (CpuPerRecord).

Results: a table on stdout, bench/results/compare.{txt,json,png}.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.limits import case_limits, default_capacity, service_max
from pipelines.running.processes import (
    ProcessGroups,
    command_lines,
    cpu_seconds,
    descendants,
    resident_bytes,
)
from pipelines_dev.enrichment_service import Service
from pipelines_dev.kafka_broker import Broker
from pipelines_dev.ports import free_ports
from pipelines_dev.topics import create_topics, delete_topics, produce

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
LOGS = ROOT / ".local" / "logs"  # each system's output in its last run
PARTITIONS = 3
KEYS = 4  # the Quix window peer counts per key: records per key must fill its windows
QUIX_WINDOW = 100


@dataclass
class Case:
    name: str
    kind: str  # copy-bytes | copy-json | enrich
    records: int
    latency_ms: int = 0
    # A run ends this long after its first visible record even if records are left: every
    # system gets enough input to run steadily for that long, and a slow one is not waited
    # on for minutes (its rate is over what it wrote; None: every record, however long).
    budget_s: float | None = None


@dataclass
class Run:
    case: str
    system: str
    rep: int
    rate: float | None
    startup_s: float | None
    e2e_rate: float | None
    seen: int
    distinct: int
    error: str = ""
    rss_mb: float | None = None  # median resident memory of the run's processes, steady
    cut: bool = False  # ended by the case's budget before every record was visible
    budget_s: float | None = None  # the case's budget (Case.budget_s)
    # CPU seconds per million visible records over the 10%-90% span, by whose processes:
    # the system's own, the broker's, the enrichment service's, the observer's (CpuPerRecord)
    cpu: dict[str, float] = field(default_factory=dict)


@dataclass
class Summary:
    case: str
    system: str
    rates: list[float] = field(default_factory=list)
    startups: list[float] = field(default_factory=list)
    e2e_rates: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    runs: int = 0
    cut: list[int] = field(default_factory=list)  # records each run cut by the budget wrote
    budget_s: float | None = None  # the case's budget, which cut those runs
    cpu: dict[str, list[float]] = field(default_factory=dict)  # Run.cpu of each run, by group

    def cpu_per_m(self, group: str) -> float | None:
        """The median CPU seconds per million records of `group`'s processes."""
        values = self.cpu.get(group)
        return statistics.median(values) if values else None

    @property
    def median(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None

    @property
    def e2e(self) -> float | None:
        return statistics.median(self.e2e_rates) if self.e2e_rates else None

    @property
    def startup(self) -> float | None:
        return statistics.median(self.startups) if self.startups else None

    @property
    def rss_mb(self) -> float | None:
        return statistics.median(self.rss) if self.rss else None


def bench_values(count: int) -> list[bytes]:
    """~150-byte JSON records with an id, the lookup key and some payload."""
    companies = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"]
    return [
        json.dumps(
            {
                "id": i,
                "company": companies[i % len(companies)],
                "amount": (i * 37) % 1000,
                "ts": 1_764_000_000_000 + i,
                "note": "benchmark record padded to a realistic size.....",
            }
        ).encode()
        for i in range(count)
    ]


# -- the systems -------------------------------------------------------------------------


def project_command(
    case: Case,
    tag: str,
    source: str,
    bootstrap: str,
    service_url: str,
    extra: list[str],
    interval_s: float = 1.0,
) -> list[str]:
    job = "enrich" if case.kind == "enrich" else "passthrough"
    sets = {
        "kafka.bootstrap_servers": bootstrap,
        "source.topics": f"[{source}]",
        "source.group_id": tag,
        "sink.topic": f"{tag}-out",
        "sink.transactional_id_prefix": tag,
        "sink.dead_letter_topic": f"{tag}-dlq",
        "checkpoint.interval": f"{interval_s:g}s",
    }
    if case.kind == "copy-json":
        sets["parse.validate_records"] = "true"
    if case.kind == "enrich":
        sets["demo_service.url"] = service_url
    args = [sys.executable, "-m", "pipelines.cli", "run", job, "--skip-preflight"]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args + extra


def beam_command(case: Case, tag: str, source: str, bootstrap: str, service_url: str) -> list[str]:
    """The enrich job as a Beam pipeline, streaming on Prism (pipelines/beam)."""
    sets = {
        "kafka.bootstrap_servers": bootstrap,
        "source.topics": f"[{source}]",
        "source.group_id": tag,
        "sink.topic": f"{tag}-out",
        "sink.dead_letter_topic": f"{tag}-dlq",
        "demo_service.url": service_url,
    }
    args = [
        sys.executable,
        "-m",
        "pipelines_dev.commands",
        "beam",
        "run",
        "enrich",
        "--skip-preflight",
    ]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args


def peer_command(
    system: str,
    case: Case,
    tag: str,
    source: str,
    bootstrap: str,
    service_url: str,
    state_dir: str,
    interval_s: float = 1.0,
) -> list[str]:
    """A peer's app for the case (bench/peers): Quix as a user first writes it, or a peer
    with the settings its own search found best (PEER_TUNED); `bytewax-tuned` is Bytewax
    as an expert writes it for this machine (bench/peers/bytewax_lean.py)."""
    if system == "bytewax-tuned":
        return lean_bytewax_command(case, tag, source, bootstrap, service_url, interval_s)
    peer = system.removesuffix("-tuned")
    app = f"{peer}_enrich" if case.kind == "enrich" else f"{peer}_copy"
    cmd = [sys.executable, "-m", f"bench.peers.{app}", "--commit-interval", f"{interval_s:g}"]
    cmd += ["--bootstrap", bootstrap, "--source", source, "--sink", f"{tag}-out"]
    cmd += ["--group", tag, "--state-dir", state_dir]
    if case.kind == "enrich":
        cmd += ["--url", service_url]
        if peer == "quix":
            cmd += ["--window", str(QUIX_WINDOW)]
    else:
        cmd += ["--format", "bytes" if case.kind == "copy-bytes" else "json"]
    if system.endswith("-tuned") or system == "bytewax":
        cmd += PEER_TUNED[peer][case.kind]
    return cmd


# The peers' best settings per case kind, from `python -m bench.peer_search` (its table:
# bench/results/peer-search.txt): the same tuning effort as project-tuned gets. Bytewax runs
# with its best only; Quix runs both as a user first writes it and tuned (`quix-tuned`).
# Commit intervals stay at the jobs' 1 s here (a longer one trades latency for rate, for the
# jobs too: `make bench-latency` compares them at 1, 5 and 10 s).
PEER_TUNED: dict[str, dict[str, list[str]]] = {
    "quix": {"copy-bytes": [], "copy-json": [], "enrich": ["--window", "500"]},
    "bytewax": {
        "copy-bytes": ["--batch", "1000", "--workers", "1"],
        "copy-json": ["--batch", "1000", "--workers", "1"],
        "enrich": ["--batch", "1000", "--workers", "3"],
    },
}
PEERS = ("quix", "quix-tuned", "bytewax", "bytewax-tuned")

# Bytewax as an expert writes it for 2 cores (bench/peers/bytewax_lean.py): its processes,
# poll size and lookups in flight, the best of `bench.peer_search --peers bytewax-tuned`
# (bench/results/peer-search-bytewax-tuned-*.txt; the copies' nine candidates all ran
# within 152-162k records/s here, so the two processes stay for a machine where they pay).
LEAN_BYTEWAX: dict[str, list[str]] = {
    "copy-bytes": ["--processes", "2", "--batch", "20000"],
    "copy-json": ["--processes", "2", "--batch", "20000"],
    "enrich": "--processes 2 --batch 10000 --lookup-batch 1000 --in-flight 32".split(),
}
LEAN_WORK = {"copy-bytes": "bytes", "copy-json": "json", "enrich": "enrich"}


def lean_bytewax_command(
    case: Case, tag: str, source: str, bootstrap: str, service_url: str, interval_s: float
) -> list[str]:
    cmd = [sys.executable, "-m", "bench.peers.bytewax_lean", "--commit-interval", f"{interval_s:g}"]
    cmd += ["--bootstrap", bootstrap, "--source", source, "--sink", f"{tag}-out"]
    cmd += ["--group", tag, "--state-dir", "-", "--work", LEAN_WORK[case.kind]]
    cmd += LEAN_BYTEWAX[case.kind]
    return cmd + (["--url", service_url] if case.kind == "enrich" else [])


# Project variants: the defaults, and the best settings found by hand for the case (the
# defaults must reach 80% of it). Tuned settings are what docs/performance.md's sizing section says.
TUNED = {
    "copy-bytes": [],  # nothing to tune: the copy never leaves the JVM
    "copy-json": ["--set", "source.max_poll_records=2000"],
    "enrich": ["--set", "enrichment.capacity=16000"],  # the best rate at 50 ms, make profile
}


def use_tuning(items: list[str]) -> None:
    """`KEY=VALUE` settings for every project-tuned run instead of the committed ones."""
    for kind in TUNED:
        TUNED[kind] = [arg for item in items for arg in ("--set", item)]


# The same job writing at least once (no transactions, output visible as written): the row
# to hold beside Bytewax, whose sink has no transactions, and beside the job itself, which
# says what exactly once costs here.
AT_LEAST_ONCE_JOB = ["--set", "sink.delivery=at-least-once"]

# The Python stage in a worker process (python.execution_mode: process) beside the default,
# inside the JVM (thread): the parse, and the enrichment (its default operator, flowing,
# runs in either mode).
MODE_CASES = {"copy-json", "enrich-5ms", "enrich-50ms"}
PROCESS_MODE = ["--set", "python.execution_mode=process"]
# The enrichment through PyFlink's AsyncFunction (the operator before flowing), beside it.
BATCHED = ["--set", "enrichment.operator=batched"]
BATCHED_CASES = {"enrich-5ms", "enrich-50ms"}

# The Beam pipeline runs beside the PyFlink job where the issue asks for it: 50 ms lookups.
BEAM_CASES = {"enrich-50ms"}
# Where the second core goes: the job at parallelism 2 (project-p2) beside parallelism 1.
SCALING_CASES = {"copy-json", "enrich-50ms"}
SCALED = ["--set", "job.parallelism=2"]


# The job on a standalone cluster of two TaskManagers with one slot each, at parallelism 2,
# submitted with `pipelines-dev submit --stop-on-exit` (Ctrl-C stops it with a savepoint).
# Each TaskManager runs its Python stage in an interpreter of its own, so the two subtasks
# do not share a GIL as project-p2's do in one local run: the shape Bytewax's best enrich
# setting has (3 worker processes). Its RSS counts the cluster's JVMs too. Only with
# --cluster: on this machine's 2 cores it ran at one local run's rate with 4x its memory
# (bench/results/compare-cluster-p2.txt), so the full table leaves it out.
CLUSTER_SYSTEMS = {
    "project-cluster-p2": SCALED,
    "project-cluster-p2-alo": SCALED + AT_LEAST_ONCE_JOB,
}
CLUSTER_CASES = {"copy-json", "enrich-5ms", "enrich-50ms"}


class TwoTaskManagers:
    """The cluster the project-cluster-* systems run on: started once when a selected case
    has one of them (`up`), on free ports and a state directory of its own, ended by
    `down` on every path."""

    def __init__(self) -> None:
        from pipelines_dev.flink_cluster import Cluster

        rest = free_ports(2)  # two adjacent free ports: two draws could pick one twice
        self.cluster = Cluster(
            state_dir=Path(tempfile.mkdtemp(prefix="bench-cluster-")),
            rest_port=rest,
            rpc_port=rest + 1,
            slots=1,
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.cluster.rest_port}"

    def up(self) -> None:
        self.cluster.up()
        self.cluster.start_taskmanager()
        deadline = time.monotonic() + 120
        while (self.cluster.overview() or {}).get("taskmanagers", 0) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the bench cluster has no second TaskManager after 120 s")
            time.sleep(0.5)

    def pids(self) -> set[int]:
        """The cluster's daemons and the processes below them."""
        conf = str(self.cluster.conf_dir)
        return {p for pid, cmd in command_lines().items() if conf in cmd for p in descendants(pid)}

    def rss_mb(self) -> float:
        """Resident memory of the cluster's daemons and the processes below them, in MB."""
        return sum(resident_bytes(pid) or 0 for pid in self.pids()) / 1e6

    def down(self) -> None:
        try:
            self.cluster.down()
        finally:
            shutil.rmtree(self.cluster.state_dir, ignore_errors=True)


CLUSTER: TwoTaskManagers | None = None  # set by main while the cluster runs


def systems_for(case: Case, tuned: bool, cluster: bool = False) -> list[str]:
    names = ["project"]
    if tuned:
        names.append("project-alo")
    if tuned and TUNED[case.kind]:
        names.append("project-tuned")
    if tuned and case.name in MODE_CASES:
        names.append("project-process")
    if tuned and case.name in BATCHED_CASES:
        names.append("project-batched")
    if tuned and case.name in SCALING_CASES:
        names.append("project-p2")
    if tuned and case.name in SCALING_CASES and case.name in MODE_CASES:
        # Two tasks in one TaskManager share its interpreter's GIL in thread mode (project-p2),
        # not in process mode.
        names.append("project-process-p2")
    if cluster and case.name in CLUSTER_CASES:
        names += list(CLUSTER_SYSTEMS)
    if case.name in BEAM_CASES:
        names.append("beam")
    names.append("quix")
    if tuned and PEER_TUNED["quix"][case.kind]:
        names.append("quix-tuned")
    if tuned:
        names += ["bytewax", "bytewax-tuned"]
    return names


# -- one run ------------------------------------------------------------------------------


def system_command(
    system: str,
    case: Case,
    tag: str,
    source: str,
    bootstrap: str,
    service_url: str,
    state_dir: str,
    interval_s: float = 1.0,
) -> list[str]:
    """The command line of one system over `case`, reading `source` and writing `tag`-out."""
    if system in PEERS:
        return peer_command(
            system, case, tag, source, bootstrap, service_url, state_dir, interval_s
        )
    if system == "beam":
        return beam_command(case, tag, source, bootstrap, service_url)
    if system in CLUSTER_SYSTEMS:
        if CLUSTER is None:
            raise RuntimeError(f"{system} needs the bench cluster up (TwoTaskManagers)")
        args = project_command(
            case, tag, source, bootstrap, service_url, CLUSTER_SYSTEMS[system], interval_s
        )
        at = args.index("run")
        # submit runs the preflight the local runs skip: its checks are on the client only
        args[at - 1 : at + 3] = ["pipelines_dev.commands", "submit", args[at + 1]]
        return args + ["--stop-on-exit", "--jobmanager", CLUSTER.address]
    extra = {
        "project-tuned": TUNED[case.kind],
        "project-p2": SCALED,
        "project-alo": AT_LEAST_ONCE_JOB,
        "project-process": PROCESS_MODE,
        "project-process-p2": PROCESS_MODE + SCALED,
        "project-batched": BATCHED,
    }.get(system, [])
    return project_command(case, tag, source, bootstrap, service_url, extra, interval_s)


def stop_system(proc: subprocess.Popen, system: str) -> str:
    """Stop a system still running as a user would (Ctrl-C for the jobs, SIGTERM for the
    peers); what went wrong, or ""."""
    if proc.poll() is not None:
        return ""
    proc.send_signal(signal.SIGTERM if system in PEERS else signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        return "did not stop within 60 s of a signal"
    return ""


class Observer(threading.Thread):
    """Notes when each record of a topic becomes visible to read_committed readers, and
    reads them all to check that every id shows once.

    Visibility is timed from the broker, not from this reader: every CLOCK_S the clock
    asks for the partitions' last stable offsets (ListOffsets, read_committed: the end
    of what such a reader may see) and appends one time per newly visible offset to
    `times`. A Python reader cannot keep up with the fastest systems here (one
    confluent-kafka consumer read a pre-filled topic at ~130-190k records/s on this
    machine), so timing its reads would rate the reader. An offset is a record or a
    transaction's commit marker (one per partition a transaction wrote to, about three
    a second at 1 s commits): against tens of thousands of records a second, noise.

    The reader fills `ids` and counts `read`; `done` is set once it has every id."""

    CLOCK_S = 0.05

    def __init__(self, bootstrap: str, topic: str, expected: int, reading: bool = True):
        """`reading=False`: the clock alone, for a caller that needs only when records
        became visible (bench.startup), not which."""
        super().__init__(daemon=True, name=f"observer-{topic}")
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka.admin import AdminClient

        self.topic = topic
        self.expected = expected
        self.times: list[float] = []  # a visible time per offset, from the clock
        self.ids: set[int] = set()
        self.read = 0
        self.done = threading.Event()
        self.stop = threading.Event()
        self.consumer: Consumer | None = None
        if reading:
            self.consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"obs-{topic}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 50,
                    "fetch.max.bytes": 104_857_600,
                    "max.partition.fetch.bytes": 10_485_760,
                }
            )
            self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.clock = threading.Thread(target=self._clock, daemon=True, name=f"clock-{topic}")

    def start(self) -> None:
        super().start()
        self.clock.start()

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        self.clock.join(timeout)

    def visible(self) -> int | None:
        """The offsets a read_committed reader may see now, over all partitions."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        asked = {TopicPartition(self.topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        try:
            answers = self.admin.list_offsets(
                asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=5
            )
            return sum(future.result().offset for future in answers.values())
        except Exception:  # the topic not there yet, a slow answer: the next tick asks again
            return None

    def _clock(self) -> None:
        while not self.stop.wait(self.CLOCK_S):
            count = self.visible()
            if count is not None:
                note_visible(self.times, count, time.monotonic())

    def run(self) -> None:
        import orjson

        consumer = self.consumer
        if consumer is None:
            return
        try:
            while not self.stop.is_set():
                messages = consumer.consume(num_messages=5000, timeout=0.2)
                for message in messages:
                    if message.error() or message.value() is None:
                        continue
                    self.read += 1
                    try:
                        self.ids.add(int(orjson.loads(message.value())["id"]))
                    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                        pass
                if len(self.ids) >= self.expected:
                    self.done.set()
        finally:
            consumer.close()


def note_visible(times: list[float], count: int, now: float) -> None:
    """`count` offsets are visible at `now`: one time for each one not seen before. A count
    lower than before (a slow answer overtaken by a later one) changes nothing."""
    if count > len(times):
        times.extend([now] * (count - len(times)))


class Launched:
    """A system `launched` started: its process and log, and what stopping it reported."""

    def __init__(self, proc: subprocess.Popen, log_path: Path):
        self.proc = proc
        self.log_path = log_path
        self.stopped = ""  # stop_system's report once stopped: "" when it stopped cleanly

    def alive(self) -> bool:
        return self.proc.poll() is None


@contextmanager
def launched(system: str, command, log_name: str) -> Iterator[Launched]:
    """`system` started from the repository by `command(state_dir)` in process groups of
    its own, with a fresh state directory and its output in LOGS/`log_name`; stopped
    (stop_system), its groups ended and its state removed on the way out, on every path.
    Every benchmark runs its systems through here, so none of them leaves one behind."""
    state_dir = tempfile.mkdtemp(prefix="bench-state-")
    owner = ProcessGroups()
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / log_name
    try:
        with open(log_path, "w") as log:
            proc = owner.popen(
                command(state_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
            )
            run = Launched(proc, log_path)
            try:
                yield run
            finally:
                run.stopped = stop_system(proc, system)
    finally:
        owner.end()
        shutil.rmtree(state_dir, ignore_errors=True)


def fill_input(case: Case, bootstrap: str) -> str:
    """The case's input topic, filled once: every system and repetition reads all of it
    (each with a consumer group of its own)."""
    topic = f"bench-{case.name}-in-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {topic: PARTITIONS})
    keys = [f"k{i % KEYS}".encode() for i in range(case.records)]
    produce(bootstrap, topic, bench_values(case.records), keys=keys)
    return topic


@contextmanager
def broker_and_service(latency_ms: int = 50) -> Iterator[tuple[Broker, Service]]:
    """The local broker (left running, as `make kafka-up` leaves it) and a demo enrichment
    service on a free port, stopped on the way out: what every benchmark runs against."""
    broker = Broker()
    broker.up()
    service = Service(port=free_ports())
    service.up(latency_ms=latency_ms)
    try:
        yield broker, service
    finally:
        service.down()


def deadline_s(case: Case) -> float:
    """How long one system may take over `case` before its run counts as failed."""
    if case.budget_s is not None:  # Beam's first output came 49-133 s after launch here
        return 300 + case.budget_s
    return 120 + case.records / 100


def measure(
    case: Case,
    system: str,
    rep: int,
    bootstrap: str,
    service_url: str,
    deadline_s: float,
    source: str,
    during=None,
    others: dict[str, int | None] | None = None,
) -> Run:
    """One system over one case. `during(proc, observer)`, when given, runs in a thread
    beside the run (bench.profile samples it there); it must return once the observer is
    done or the process has ended. `others` names the pids of the broker and the service,
    whose CPU per record is counted apart from the system's."""
    tag = f"bench-{case.name}-{system}-{rep}-{uuid.uuid4().hex[:6]}"
    topics = {f"{tag}-out": PARTITIONS, f"{tag}-dlq": 1}
    create_topics(bootstrap, topics)
    observer = Observer(bootstrap, f"{tag}-out", case.records)
    observer.start()
    error = ""
    cut = False
    watcher = None
    rss: list[float] = []
    started = time.monotonic()
    try:
        with launched(
            system,
            lambda state: system_command(system, case, tag, source, bootstrap, service_url, state),
            f"bench-{system}.log",
        ) as run:
            proc = run.proc
            cpu = CpuPerRecord(lambda: cpu_groups(system, proc.pid, others or {}))
            if during is not None:
                watcher = threading.Thread(target=during, args=(proc, observer), daemon=True)
                watcher.start()
            while not observer.done.wait(0.5):
                times = observer.times
                since_first = time.monotonic() - times[0] if times else None
                if 0.1 <= progress(case, len(times), since_first) <= 0.9:
                    on_cluster = CLUSTER.rss_mb() if CLUSTER and system in CLUSTER_SYSTEMS else 0
                    rss.append(tree_rss_mb(proc.pid) + on_cluster)
                    cpu.sample(len(times))
                if case.budget_s is not None and (since_first or 0) > case.budget_s:
                    cut = not observer.done.is_set()
                    break
                if proc.poll() is not None:
                    error = f"exited with {proc.returncode} (see {run.log_path})"
                    break
                if time.monotonic() - started > deadline_s:
                    error = f"not done after {deadline_s:.0f}s"
                    break
        error = error or run.stopped
    finally:
        observer.stop.set()
        observer.join(30)
        if watcher is not None:
            watcher.join(60)
    delete_topics(bootstrap, topics)
    rate, startup, e2e, error = figures(
        observer.times, len(observer.ids), case.records, started, cut, error, observer.read
    )
    rss_mb = statistics.median(rss) if rss else None
    return Run(
        case.name,
        system,
        rep,
        rate,
        startup,
        e2e,
        observer.read,
        len(observer.ids),
        error,
        rss_mb,
        cut,
        case.budget_s,
        cpu.per_million(),
    )


def cpu_groups(system: str, pid: int, others: dict[str, int | None]) -> dict[str, set[int]]:
    """Whose CPU a run counts: the system's own processes (for a cluster system, the
    cluster's too), each of `others` (the broker, the service) and this process, which is
    the observer."""
    own = descendants(pid)
    if CLUSTER is not None and system in CLUSTER_SYSTEMS:
        own |= CLUSTER.pids()
    groups = {"own": own, "observer": {os.getpid()}}
    groups.update({name: {p} for name, p in others.items() if p})
    return groups


def progress(case: Case, seen: int, since_first: float | None) -> float:
    """How far a run is, 0 to 1: by its records, or by its budget of time once output
    shows, whichever is further (memory is sampled in the middle, 10% to 90%)."""
    done = seen / case.records
    if case.budget_s is not None and since_first is not None:
        done = max(done, since_first / case.budget_s)
    return done


def figures(
    times: list[float],
    distinct: int,
    records: int,
    started: float,
    cut: bool,
    error: str,
    read: int | None = None,
) -> tuple[float | None, float | None, float | None, str]:
    """(rate, start-up, end-to-end rate, error) of a run from when each record became
    visible. The rate is 80% of the records over the time between the 10% and 90% marks
    of what was seen: all the records, or what a run cut by its budget wrote (such a run
    cannot show every id, but it still must not show one twice). `read`: the records
    the reader read (Observer.read), against which `distinct` shows duplicates; by
    default one a visible time."""
    seen = len(times)
    read = seen if read is None else read
    complete = distinct >= records
    if not complete and not cut and not error:
        error = f"{distinct} of {records} ids"
    rate = startup = e2e = None
    if times:
        startup = times[0] - started
    if times and (complete or cut):
        e2e = distinct / max(times[-1] - started, 1e-3)
    if (complete or cut) and seen >= 10:
        rate = span_rate(times)
    if read > distinct:
        error = (error + "; " if error else "") + f"{read - distinct} duplicates"
    return rate, startup, e2e, error


def span_rate(times: list[float]) -> float:
    """Records per second between the times the 10% and the 90% marks became visible (sorted
    visible times): the records that became visible after the first and by the second, over
    the time between them. Under exactly once, records become visible a checkpoint at a time,
    so a mark's time is that of its whole checkpoint: counted as 80% of the records, a run
    of a few checkpoints would be rated by whole checkpoint intervals (800,000 records over
    6 or over 8 of them), not by what it wrote in them."""
    seen = len(times)
    t10, t90 = times[int(seen * 0.1)], times[int(seen * 0.9) - 1]
    if t90 == t10:  # one checkpoint showed both marks: no span to measure
        return 0.8 * seen / 1e-3
    return (bisect.bisect_right(times, t90) - bisect.bisect_right(times, t10)) / (t90 - t10)


class CpuMeter:
    """CPU seconds of groups of processes between `start` and `stop`, as cores. A process
    gone before `stop` (or not readable) counts for nothing rather than failing the point."""

    def __init__(self, groups: dict[str, set[int]]):
        self.groups = groups
        self.before: dict[int, float | None] = {}
        self.started = 0.0

    def start(self) -> None:
        self.before = {pid: cpu_seconds(pid) for pids in self.groups.values() for pid in pids}
        self.started = time.monotonic()

    def stop(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self.started, 1e-3)
        cores = {}
        for name, pids in self.groups.items():
            used = 0.0
            for pid in pids:
                before, after = self.before.get(pid), cpu_seconds(pid)
                if before is not None and after is not None:
                    used += after - before
            cores[name] = used / elapsed
        return cores


class CpuPerRecord:
    """CPU seconds per million records of groups of processes, from the first to the last
    `sample` of a run (measure samples over the 10%-90% span of its output). `groups()`
    names each group's pids at the time of a sample: a process that appears later (a
    Python worker) counts from the first sample that sees it."""

    def __init__(self, groups: Callable[[], dict[str, set[int]]]):
        self.groups = groups
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.members: dict[str, set[int]] = {}
        self.seen: tuple[int, int] | None = None  # records visible at the first, last sample

    def sample(self, seen: int) -> None:
        for name, pids in self.groups().items():
            for pid in pids:
                used = cpu_seconds(pid)
                if used is None:
                    continue  # gone: what it used after its last sample is not counted
                self.first.setdefault(pid, used)
                self.last[pid] = used
                self.members.setdefault(name, set()).add(pid)
        self.seen = (self.seen[0] if self.seen else seen, seen)

    def per_million(self) -> dict[str, float]:
        if not self.seen or self.seen[1] <= self.seen[0]:
            return {}
        records = self.seen[1] - self.seen[0]
        return {
            name: sum(self.last[p] - self.first[p] for p in pids) / records * 1e6
            for name, pids in self.members.items()
        }


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and every process below it (JVMs, Python workers), in MB."""
    return sum(resident_bytes(each) or 0 for each in descendants(pid)) / 1e6  # 0: gone since


# -- the whole benchmark ------------------------------------------------------------------


# Every case's runs end BUDGET_S after their first visible record: the inputs are sized so
# the jobs run for most of it (an exactly-once output shows a 1 s commit at a time, and a
# run of two or three commits has no 10%-90% span to speak of), and a system that is far
# slower is measured over the same time instead of being waited on for minutes.
BUDGET_S = 30.0


def cases(quick: bool) -> list[Case]:
    """The cases, each with enough records for many 1 s commits at the jobs' rates."""
    if quick:
        return [
            Case("copy-bytes", "copy-bytes", 400_000, budget_s=BUDGET_S),
            Case("copy-json", "copy-json", 300_000, budget_s=BUDGET_S),
            Case("enrich-50ms", "enrich", 30_000, 50, budget_s=BUDGET_S),
        ]
    return [
        Case("copy-bytes", "copy-bytes", 1_500_000, budget_s=BUDGET_S),
        Case("copy-json", "copy-json", 1_000_000, budget_s=BUDGET_S),
        Case("enrich-5ms", "enrich", 600_000, 5, budget_s=BUDGET_S),
        Case("enrich-50ms", "enrich", 600_000, 50, budget_s=BUDGET_S),
        Case("enrich-500ms", "enrich", 300_000, 500, budget_s=BUDGET_S),
    ]


def summarise(runs: list[Run]) -> list[Summary]:
    summaries: dict[tuple[str, str], Summary] = {}
    for run in runs:
        s = summaries.setdefault((run.case, run.system), Summary(run.case, run.system))
        s.runs += 1
        if run.cut:
            s.cut.append(run.distinct)
            s.budget_s = run.budget_s
        if run.rate is not None and not run.error:
            s.rates.append(run.rate)
        if run.startup_s is not None:
            s.startups.append(run.startup_s)
        if run.e2e_rate is not None and not run.error:
            s.e2e_rates.append(run.e2e_rate)
        if run.error:
            s.failures.append(f"rep {run.rep}: {run.error}")
        if run.rss_mb is not None:
            s.rss.append(run.rss_mb)
        if not run.error:
            for group, value in run.cpu.items():
                s.cpu.setdefault(group, []).append(value)
    return list(summaries.values())


def limits_of(
    summaries: list[Summary], selected: list[Case], services: dict[str, float | None]
) -> dict[str, dict[str, float]]:
    """Each case's limits by name (bench.limits), from this run's own figures."""
    medians = {(s.case, s.system): s.median for s in summaries}
    capacity = default_capacity()
    return {
        case.name: case_limits(
            case.kind,
            case.latency_ms,
            capacity,
            jvm_copy=medians.get(("copy-bytes", "project")),
            parse_only=medians.get(("copy-json", "project")),
            service=services.get(case.name),
        )
        for case in selected
    }


def limits_text(limits: dict[str, dict[str, float]], notes: dict[str, str]) -> str:
    """Below the table: every limit of every case, the smallest marked."""
    lines = ["limits (records/s; `of lim` = median / the smallest):"]
    for case, found in limits.items():
        if not found:
            why = (
                "none: this case is the JVM-only copy"
                if case == "copy-bytes"
                else "none measured: the JVM-only copy needs the copy-bytes case in the run"
            )
            lines.append(f"  {case:13} {why}")
            continue
        least = min(found, key=found.__getitem__)
        parts = [
            f"{'*' if name == least else ''}{name} {rate:,.0f}" for name, rate in found.items()
        ]
        note = f" [service: {notes[case]}]" if notes.get(case) else ""
        lines.append(f"  {case:13} " + ", ".join(parts) + note)
    return "\n".join(lines)


def _cell(value: float | None, spec: str, width: int) -> str:
    return format(value, spec) if value is not None else "-".rjust(width)


def table(summaries: list[Summary], limits: dict[str, dict[str, float]] | None = None) -> str:
    limits = limits or {}
    header = (
        f"{'case':13} {'system':14} {'min/s':>9} {'median/s':>9} {'max/s':>9} "
        f"{'x quix':>7} {'x bwax':>7} {'x bwt':>6} {'of lim':>6} {'start s':>8} {'e2e/s':>8} {'RSS MB':>7} "
        f"{'CPU s/M':>7} {'broker':>6} {'svc':>5}  notes"
    )
    lines = [header, "-" * len(header)]
    # Each row against both peers as they run: Quix exactly once (the project's rows that
    # write exactly once pair with it), Bytewax at least once (project-alo pairs with it).
    quix = {s.case: s.median for s in summaries if s.system == "quix" and s.median}
    bytewax = {s.case: s.median for s in summaries if s.system == "bytewax" and s.median}
    lean = {s.case: s.median for s in summaries if s.system == "bytewax-tuned" and s.median}
    for s in summaries:
        peer, other, best = quix.get(s.case), bytewax.get(s.case), lean.get(s.case)
        ratio = s.median / peer if s.median and peer else None
        versus = s.median / other if s.median and other else None
        to_best = s.median / best if s.median and best else None
        low, high = (min(s.rates), max(s.rates)) if s.rates else (None, None)
        found = limits.get(s.case)
        share = s.median / min(found.values()) if found and s.median else None
        lines.append(
            f"{s.case:13} {s.system:14} {_cell(low, '9,.0f', 9)} "
            f"{_cell(s.median, '9,.0f', 9)} {_cell(high, '9,.0f', 9)} "
            f"{_cell(ratio, '7.2f', 7)} {_cell(versus, '7.2f', 7)} {_cell(to_best, '6.2f', 6)} "
            f"{_cell(share, '6.0%', 6)} "
            f"{_cell(s.startup, '8.1f', 8)} "
            f"{_cell(s.e2e, '8,.0f', 8)} {_cell(s.rss_mb, '7,.0f', 7)} "
            f"{_cell(s.cpu_per_m('own'), '7.1f', 7)} {_cell(s.cpu_per_m('broker'), '6.1f', 6)} "
            f"{_cell(s.cpu_per_m('service'), '5.1f', 5)}  {'; '.join(notes_of(s))}"
        )
    return "\n".join(lines)


def costs_text(summaries: list[Summary]) -> str:
    """Below the table: what exactly once costs (the job against itself writing at least
    once, per case) and what the Python bridge costs (the parsing copy against the
    JVM-only copy, both at least once), from this run's medians."""
    medians = {(s.case, s.system): s.median for s in summaries if s.median}
    lines = []
    eo = [
        f"{case} {medians[(case, 'project')] / alo:.2f}"
        for (case, system), alo in medians.items()
        if system == "project-alo" and (case, "project") in medians
    ]
    if eo:
        lines.append(
            "what exactly once costs (project / project-alo, 1 s checkpoints): " + ", ".join(eo)
        )
    jvm, python = (
        medians.get(("copy-bytes", "project-alo")),
        medians.get(("copy-json", "project-alo")),
    )
    if jvm and python:
        lines.append(
            f"what the Python bridge costs (copy-json / copy-bytes, at least once): "
            f"{python / jvm:.2f} (each record is handed to Python, parsed and written back as JSON)"
        )
    return "\n".join(lines)


def versus_best_text(summaries: list[Summary]) -> str:
    """Below the table: the job (exactly once) against Bytewax at its best (at least once)
    case by case, as the rate ratio and each one's CPU per million records."""
    rows = {(s.case, s.system): s for s in summaries if s.median}
    lines = []
    for (case, system), ours in rows.items():
        best = rows.get((case, "bytewax-tuned"))
        if system != "project" or best is None:
            continue
        assert ours.median is not None and best.median is not None  # rows hold medians
        cpu = f"{_cell(ours.cpu_per_m('own'), '.1f', 1)} / {_cell(best.cpu_per_m('own'), '.1f', 1)}"
        lines.append(
            f"  {case:13} {ours.median:>9,.0f} / {best.median:>9,.0f} = "
            f"{ours.median / best.median:.2f}x   CPU s/M {cpu}"
        )
    if not lines:
        return ""
    return "\n".join(
        ["against Bytewax at its best (project exactly once / bytewax-tuned at least once):"]
        + lines
    )


def results_text(
    summaries: list[Summary], limits: dict[str, dict[str, float]], service_notes: dict[str, str]
) -> str:
    """What bench/results/compare.txt holds: the table, the limits, what exactly once and
    the bridge cost, and the job against Bytewax at its best."""
    parts = [
        table(summaries, limits),
        limits_text(limits, service_notes),
        costs_text(summaries),
        versus_best_text(summaries),
    ]
    return "\n\n".join(part for part in parts if part)


def rendered_from_json(path: Path) -> str:
    """results_text of a run's JSON (bench/results/compare*.json): the text again, in this
    code's format, without measuring anything."""
    data = json.loads(path.read_text())
    summaries = [Summary(**s) for s in data["summaries"]]
    return results_text(summaries, data["limits"], data["service_max"]["notes"])


def notes_of(s: Summary) -> list[str]:
    """A row's notes: how it writes if not exactly once, runs cut by the budget, failures."""
    notes = [AT_LEAST_ONCE[s.system]] if s.system in AT_LEAST_ONCE else []
    if s.cut:
        low, high = min(s.cut), max(s.cut)
        wrote = f"{low:,}" if low == high else f"{low:,}-{high:,}"
        at = f" at {s.budget_s:g} s of output" if s.budget_s is not None else ""
        notes.append(f"{len(s.cut)} of {s.runs} runs cut{at} ({wrote})")
    return notes + s.failures


# Systems that write at least once (the others: exactly once, read back with read_committed).
AT_LEAST_ONCE = {
    "project-alo": "at least once (sink.delivery)",
    "beam": "at least once (idempotent writes flushed per bundle, no transactions)",
    "bytewax": "at least once (its Kafka sink has no transactions)",
    "bytewax-tuned": "at least once (2 processes, lean Kafka I/O, no transactions)",
}


def chart(
    summaries: list[Summary], path: Path, limits: dict[str, dict[str, float]] | None = None
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart (pip install -e '.[bench]')")
        return
    case_names = list(dict.fromkeys(s.case for s in summaries))
    systems = list(dict.fromkeys(s.system for s in summaries))
    fig, ax = plt.subplots(figsize=(max(6, 1.9 * len(case_names)), 4.5))
    width = 0.8 / len(systems)
    # A colour per system: the default cycle has 10 and a full run has more systems, which
    # gave the Beam pipeline the job's colour.
    colours = plt.get_cmap("tab20")
    for i, system in enumerate(systems):
        xs, medians, lows, highs = [], [], [], []
        for x, case in enumerate(case_names):
            s = next((s for s in summaries if s.case == case and s.system == system), None)
            median = None if s is None else s.median
            if s is None or median is None:
                continue
            xs.append(x + (i - (len(systems) - 1) / 2) * width)
            medians.append(median)
            lows.append(median - min(s.rates))
            highs.append(max(s.rates) - median)
        ax.bar(
            xs,
            medians,
            width,
            yerr=[lows, highs],
            capsize=3,
            label=system,
            color=colours(i % colours.N),
        )
    for x, case in enumerate(case_names):
        found = (limits or {}).get(case)
        if found:  # the case's limit across its group of bars
            ax.hlines(min(found.values()), x - 0.45, x + 0.45, colors="black", linestyles="dashed")
    ax.plot([], [], "k--", label="limit (the smallest measured)")
    ax.set_yscale("log")
    ax.set_ylabel("records/s, median of runs (bars: min-max; log)")
    ax.set_xticks(range(len(case_names)), case_names)
    ax.set_title(
        f"Throughput, same broker, same run ({os.cpu_count()} cores): exactly once "
        f"but {', '.join(sorted(AT_LEAST_ONCE))} (at least once)"
    )
    ax.legend(frameon=False, fontsize=8, ncol=4, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart: {path}")


PAGE = ROOT / "docs" / "performance.md"  # its results block holds compare.txt
BLOCK = ("<!-- bench:compare -->\n```\n", "```\n<!-- /bench:compare -->")


def page_with_table(page: str, table_text: str, block=BLOCK) -> str:
    """A docs page with its results block (`block`: the start and end markers) replaced by
    `table_text`."""
    start, end = block
    head, found, rest = page.partition(start)
    if not found or end not in rest:
        raise SystemExit(f"the page has no {start.strip()} ... {end.strip()} block")
    return head + start + table_text.rstrip("\n") + "\n" + end + rest.split(end, 1)[1]


def copy_to_page(results_name: str, block) -> None:
    """`--page` of the benchmarks: bench/results/<results_name> into its docs block."""
    text = (RESULTS / results_name).read_text()
    PAGE.write_text(page_with_table(PAGE.read_text(), text, block))


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM unwind a benchmark however it was started (`make bench &`
    inherits SIGINT as ignored), so its `finally` blocks stop the runs, the service and
    whatever else it started. The first signal starts the unwinding and later ones are
    ignored: a second Ctrl-C would otherwise interrupt a `finally` half way and leave
    what it was stopping running. Every stop on that path is bounded in time."""

    def unwind(signum, _frame) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if signum == signal.SIGTERM:
            sys.exit(143)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, unwind)
    signal.signal(signal.SIGTERM, unwind)


def main(argv: list[str] | None = None) -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer records and cases (a few minutes); no tuned variants",
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--records", type=int, help="records per case instead of each case's own count"
    )
    parser.add_argument(
        "--tune",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="settings for the project-tuned runs instead of the committed ones (repeatable): "
        "try a setting side by side with the defaults",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="also the job on a standalone cluster of two one-slot TaskManagers at "
        "parallelism 2 (project-cluster-p2, -alo): not in the full table, where it measured "
        "no faster than one local run (bench/results/compare-cluster-p2.txt)",
    )
    parser.add_argument(
        "--label", help="write bench/results/compare-LABEL.* (a partial run's own name)"
    )
    parser.add_argument("--cases", help="comma-separated case names to run")
    parser.add_argument("--systems", help="comma-separated systems to run")
    parser.add_argument(
        "--page",
        "--readme",
        action="store_true",
        help="only write bench/results/compare.txt again from compare.json (in this code's "
        "format) and copy it into docs/performance.md's table",
    )
    args = parser.parse_args(argv)
    if args.tune:
        use_tuning(args.tune)
    if args.page:
        text = rendered_from_json(RESULTS / "compare.json")
        (RESULTS / "compare.txt").write_text(text + "\n")
        PAGE.write_text(page_with_table(PAGE.read_text(), text))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    from pipelines.beam.java import ensure_java, ensure_prism

    ensure_java()  # set up before any run, so no start-up figure includes mvn or go
    ensure_prism()
    selected = [c for c in cases(args.quick) if not args.cases or c.name in args.cases.split(",")]
    if args.records:
        selected = [replace(c, records=args.records) for c in selected]
    runs: list[Run] = []
    inputs: dict[str, str] = {}
    services: dict[str, float | None] = {}
    service_notes: dict[str, str] = {}
    global CLUSTER

    def systems_of(case: Case) -> list[str]:
        order = systems_for(case, not args.quick, args.cluster)
        return [s for s in order if s in args.systems.split(",")] if args.systems else order

    wanted = {s for c in selected for s in systems_of(c)}
    with broker_and_service() as (broker, service):
        try:
            if wanted & set(CLUSTER_SYSTEMS):
                CLUSTER = TwoTaskManagers()
                CLUSTER.up()
            for case in selected:
                inputs[case.name] = fill_input(case, broker.bootstrap)
            others = {"broker": broker.pid(), "service": service.pid_file.live()}
            for case in selected:
                if case.kind == "enrich":
                    service.configure(latency_ms=case.latency_ms, failure_rate=0.0, down=False)
                    found = service_max(service.url)
                    services[case.name], service_notes[case.name] = found.records_per_s, found.note
                    print(
                        f"service max at {case.latency_ms} ms: {found.records_per_s or 0:,.0f} "
                        f"records/s ({found.note})",
                        flush=True,
                    )
            for rep in range(1, args.reps + 1):
                for case in selected:
                    service.configure(latency_ms=case.latency_ms, failure_rate=0.0, down=False)
                    order = systems_of(case)
                    for system in order if rep % 2 else order[::-1]:
                        run = measure(
                            case,
                            system,
                            rep,
                            broker.bootstrap,
                            service.url,
                            deadline_s(case),
                            inputs[case.name],
                            others=others,
                        )
                        runs.append(run)
                        rate = f"{run.rate:,.0f}/s" if run.rate else "-"
                        start = f"{run.startup_s:.1f}s" if run.startup_s is not None else "-"
                        cut = f"cut at {run.distinct:,} " if run.cut else ""
                        print(
                            f"rep {rep} {case.name:13} {system:14} {rate:>12} start {start:>6} "
                            f"{cut}{run.error}",
                            flush=True,
                        )
        finally:
            delete_topics(broker.bootstrap, list(inputs.values()))
            if CLUSTER is not None:
                CLUSTER.down()
                CLUSTER = None
    summaries = summarise(runs)
    limits = limits_of(summaries, selected, services)
    text = results_text(summaries, limits, service_notes)
    print(text)
    # A run of some cases or systems does not replace the full table.
    partial = bool(args.cases or args.systems or args.records or args.reps != 3)
    name = "compare-quick" if args.quick else "compare-partial" if partial else "compare"
    name = f"compare-{args.label}" if args.label else name
    (RESULTS / f"{name}.txt").write_text(text + "\n")
    (RESULTS / f"{name}.json").write_text(
        json.dumps(
            {
                "machine": {"cores": os.cpu_count()},
                "reps": args.reps,
                "cases": [asdict(c) for c in selected],
                "runs": [asdict(r) for r in runs],
                "summaries": [asdict(s) for s in summaries],
                "limits": limits,
                "service_max": {"records_per_s": services, "notes": service_notes},
            },
            indent=2,
        )
    )
    chart(summaries, RESULTS / f"{name}.png", limits)


if __name__ == "__main__":
    main()
