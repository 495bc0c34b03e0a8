"""Test a job's `build` in seconds: records from a list, the real stages (parse, your lookup
client, event time and windows, all on a local Flink environment), and what each sink would
have written back as lists. No Kafka, no cluster:

    from pipelines import testing
    out = testing.run("windowed", [{"id": 1, "key": "a", "ts": 1000}, b"{not json"])
    assert out.records == [{"key": "a", "window_start": 0, ...}]
    assert out.dead_letters[0]["error"].startswith("not JSON")

The source's rows come from the list (topic `testing.TOPIC`, partition 0 unless a `Record`
says otherwise, offsets in order), the input ends, so event time reaches the end and every
window fires; each sink's records are collected instead of written (`Output.to(sink)`,
with `records`, `dead_letters` and `late` for the default sinks). Parallelism is 1 unless
overridden, so the output's order is the input's where the job keeps order.

What this does not test: Kafka itself (offsets, transactions, exactly-once across a
restart), and thread mode (python.execution_mode: the Python stages run in this process,
in process mode, so a lookup double is the test's own object). The integration smoke test
`pipelines-dev new` writes beside this one does.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pipelines.flink.environment import MINI_CLUSTER_ON_LOOPBACK
from pipelines.flink.gateway import imports_of_a_launch
from pipelines.flink.minicluster import mini_cluster_port, start_mini_cluster
from pipelines.flink.workers import in_process_worker_boot, in_process_worker_pool
from pipelines.lookups import ClientFactory
from pipelines.records.lines import key_of, split_meta
from pipelines.running import registry
from pipelines.running.job import Build, Job
from pipelines.running.wiring import built
from pipelines.settings import ExecutionMode, MetricsSettings, Settings, load_settings
from pipelines.stages import JobGraph, graph_of

__all__ = ["TOPIC", "Output", "Record", "Written", "run", "settings_for"]

TOPIC = "input"
# The shared mini-cluster's slots: a job needing more (its parallelism above this) runs on
# a mini-cluster of its own, as PyFlink's local target starts one.
SLOTS = 4
# False: every run on a mini-cluster of its own, started and stopped around it (PyFlink's
# local target; `make bench-inner-loop` measures both).
SHARED_CLUSTER = True
_TAG = "\x02"  # between a collected element's sink name and its JSON text
_RAW_TAG = "\x03"  # between a collected element's sink name and its raw row's key and value


@dataclass(frozen=True)
class Record:
    """One input record with its Kafka metadata; a plain dict, str or bytes in the input
    list is a Record with the defaults."""

    value: bytes | str | dict | None
    key: bytes | str | None = None
    partition: int = 0
    timestamp: int = -1  # Kafka's "no timestamp"
    topic: str = TOPIC

    def value_bytes(self) -> bytes | None:
        if self.value is None or isinstance(self.value, bytes):
            return self.value
        if isinstance(self.value, str):
            return self.value.encode()
        return json.dumps(self.value).encode()


@dataclass(frozen=True)
class Written:
    """One record a sink would have written: the JSON record (a dict) for the JSON sinks,
    the value's bytes for the raw one; its key as the sink would set it from the input."""

    sink: str
    value: Any
    key: bytes | None = None


@dataclass
class Output:
    written: list[Written] = field(default_factory=list)

    def to(self, sink: str) -> list[Any]:
        """The values one sink wrote, in the order they came out."""
        return [w.value for w in self.written if w.sink == sink]

    @property
    def records(self) -> list[Any]:
        return self.to("kafka-sink")

    @property
    def dead_letters(self) -> list[Any]:
        return self.to("dead-letter-sink")

    @property
    def late(self) -> list[Any]:
        return self.to("late-sink")


def settings_for(job: str, *overrides: str) -> Settings:
    """A job's settings from its conf/base file with `overrides` (KEY=VALUE), at parallelism
    1 unless one of them says otherwise; the environment's variables are not read."""
    return _settings(registry.load(job), overrides)


def _settings(job: Job, overrides: Sequence[str]) -> Settings:
    sets = ["job.parallelism=1", *overrides]
    return load_settings(job.name, overrides=sets, environ={}, sections=job.sections).settings


def run(
    job: str | Job | Build,
    inputs: Iterable[Record | dict | str | bytes | None],
    *,
    settings: Settings | None = None,
    overrides: Sequence[str] = (),
    lookup_client: ClientFactory | None = None,
) -> Output:
    """Build `job` (a job's name, its `Job`, or a `build(env, settings)` function) over
    `inputs` and run it to the end of its input; what each sink would have written.
    `lookup_client`, a factory like the job's own, replaces the client of every enrichment
    stage: the test double that keeps a job's tests its own when its client changes (it
    runs on the local worker, so define it in an importable module, e.g. the test's)."""
    job = _resolve(job)
    if settings is None:
        settings = _settings(job, overrides)
    # A test's JVM (in this process, without the loopback shim) serves no metrics port.
    # Its Python stages run in process mode, in this process's worker pool, whatever the
    # settings say: there a lookup double is the test's own object (thread mode would run
    # it in the JVM's interpreter, another copy). The job's smoke test runs its own mode.
    settings = settings.model_copy(
        update={
            "metrics": MetricsSettings(prometheus_port=None),
            "python": settings.python.model_copy(update={"execution_mode": ExecutionMode.PROCESS}),
        }
    )
    # PyFlink fuses chained Python operators, and a fused collecting map took over the uid of
    # the side output before it ("Hash collision on user-specified ID"): kept apart here.
    extra = {**_cluster_for(settings), "python.operator-chaining.enabled": "false"}
    rows = _rows(inputs)

    def for_testing(graph: JobGraph) -> None:
        graph.test_rows = rows
        graph.collected = []
        graph.lookup_double = lookup_client

    graph = graph_of(built(job, settings, extra, setup=for_testing))
    if not graph.collected:
        return Output()
    from pyflink.common import Types

    tagged = [
        stream.map(_tagger(name, raw), output_type=Types.STRING())
        .name(f"collect-{name}")
        .uid(f"collect-{name}")
        for name, stream, raw in graph.collected
    ]
    union = tagged[0].union(*tagged[1:]) if len(tagged) > 1 else tagged[0]
    out = Output()
    # Locally PyFlink runs the Python workers in this process and sets their environment
    # (the JVM's: LD_PRELOAD among it) into os.environ: restored, so a test's later
    # subprocesses start as they would have.
    saved = dict(os.environ)
    try:
        with union.execute_and_collect(f"{settings.job.name}-test") as results:
            for element in results:
                out.written.append(_written(element))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out


# The mini-cluster of this process every run submits to, with the gateway it runs in.
_SHARED: dict[str, Any] = {}


def _cluster_for(settings: Settings) -> dict[str, str]:
    """Where a run's job goes: the process's one mini-cluster, started by its first run
    and reused by the rest (a mini-cluster of its own, started and stopped around each
    job, cost a second or more of every run), its Python operators in threads of this
    process (the worker pool PyFlink's local target uses), not a worker process per job.
    The first run starts the gateway JVM and the mini-cluster in it on a thread of their
    own while this one imports and starts the worker pool (Beam among it): about as long."""
    if not SHARED_CLUSTER or settings.job.parallelism > SLOTS:
        # Started here, on loopback, before PyFlink's local target would start it on [::].
        in_process_worker_pool()
        return dict(MINI_CLUSTER_ON_LOOPBACK)
    imports_of_a_launch()  # the thread below imports nothing while this one imports Beam
    with ThreadPoolExecutor(1, thread_name_prefix="mini-cluster") as starting:
        cluster = starting.submit(_shared_cluster)
        pool = in_process_worker_pool()
        conf = cluster.result()
    # Its workers handed to the pool by a shell script, not PyFlink's beam_boot (a Python
    # process importing apache_beam for each job: 1.5-2 s of a run).
    conf.update({
        "python.loopback-server.address": pool,
        "python.executable": str(in_process_worker_boot()),
    })  # fmt: skip
    return dict(conf)


def _shared_cluster() -> dict[str, str]:
    """The shared mini-cluster's configuration (kept in _SHARED), started on this
    process's gateway JVM unless it runs there already."""
    from pyflink.java_gateway import get_gateway

    gateway = get_gateway()
    if _SHARED.get("gateway") is not gateway:  # the first run, or its JVM was ended since
        cluster = start_mini_cluster(MINI_CLUSTER_ON_LOOPBACK, SLOTS)
        _SHARED.update(
            gateway=gateway,
            cluster=cluster,
            conf={
                "execution.target": "remote",
                "rest.address": "127.0.0.1",
                "rest.port": str(mini_cluster_port(cluster)),
            },
        )
    return _SHARED["conf"]


def _resolve(job: str | Job | Build) -> Job:
    if isinstance(job, str):
        return registry.load(job)
    return job if isinstance(job, Job) else Job(job)


def _rows(inputs: Iterable) -> list:
    from pyflink.common import Row

    offsets: dict[tuple[str, int], int] = {}
    rows = []
    for item in inputs:
        record = item if isinstance(item, Record) else Record(item)
        where = (record.topic, record.partition)
        offset = offsets.get(where, 0)
        offsets[where] = offset + 1
        key = record.key.encode() if isinstance(record.key, str) else record.key
        rows.append(
            Row(
                record.topic,
                record.partition,
                offset,
                record.timestamp,
                key,
                record.value_bytes(),
                None,
            )
        )
    return rows


def _tagger(name: str, raw: bool) -> Callable[[Any], str]:
    if raw:

        def tag_row(row: Any) -> str:
            key, value = row[4], row[5]
            encoded = [
                None if b is None else base64.b64encode(bytes(b)).decode() for b in (key, value)
            ]
            return f"{name}{_RAW_TAG}{json.dumps(encoded)}"

        return tag_row
    return lambda text: f"{name}{_TAG}{text}"


def _written(element: str) -> Written:
    if _RAW_TAG in element.partition(_TAG)[0]:
        name, _, text = element.partition(_RAW_TAG)
        key, value = (None if b is None else base64.b64decode(b) for b in json.loads(text))
        return Written(name, value, key)
    name, _, text = element.partition(_TAG)
    meta, body = split_meta(text)
    return Written(name, json.loads(body), key_of(meta))
