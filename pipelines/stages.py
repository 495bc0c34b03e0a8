"""The named stages every job is built from, so a job file reads as its pipeline:

    raw = stages.kafka_source(env, settings)
    parsed, bad = stages.parse_for_enrichment(raw, settings)
    enriched, failed = stages.enrich(parsed, settings, lookup_client)
    stages.kafka_sink(enriched, settings)
    stages.dead_letter_sink(settings, bad, failed)

(Composed like this with `enrichment.operator: batched`; the default flowing operator is
one stage with its parse: `stages.parse_and_enrich(raw, settings, lookup_client)`.)

Each builder names its operators and gives them stable uids (a savepoint maps state by
uid, so renaming one is a breaking change for running jobs). Every builder takes a `name`:
the defaults are the uids running jobs already have; a second use of a stage in one job
takes another name, and each sink a topic and a transactional-id suffix of its own. Two
operators with one uid, or two exactly-once sinks with one transactional-id prefix, are an
error when the job is built.

A stream's shape is its type. The source gives `Rows`; sinks and JVM stages take
`Records` (one JSON text record per element); the batched Python stages give `Batches`
(each element one string of JSON lines, pipelines.records.lines). Handing a stage the wrong shape
is a StageError when the job is built, naming the call that fixes it; the Flink
DataStream is `.stream`, and `.derive(stream)` wraps an operator of your own in the same
shape.

The batch contract. Records cross from the JVM into Python in batches and come back as
one element per batch: PyFlink's cost is per element, so a batch of 500 pays it once.
`batch_records` (Java RecordBatcher) turns rows into lists of rows; a batched Python stage
answers each list with ONE string, its records as lines (pipelines.records.lines).
`records(batches)` (Java SplitLines) turns such a stream back into one element per
record, in the JVM.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pipelines.flink.streams import java_stream, python_stream, window_counts_in_jvm
from pipelines.flink.streams import split_lines as split_in_jvm
from pipelines.flink.watermarks import watermark_strategy
from pipelines.kafka.connectors import build_raw_sink, build_sink, build_source, origin_type_info
from pipelines.lookups import ClientFactory
from pipelines.lookups.enrichment import apply_enrichment
from pipelines.lookups.flowing import make_flowing_function
from pipelines.records.parse import make_parse_function
from pipelines.settings import (
    ConfigError,
    DeliveryGuarantee,
    EnrichmentOperator,
    ExecutionMode,
    FieldType,
    Settings,
)

if TYPE_CHECKING:
    from pyflink.datastream import DataStream, StreamExecutionEnvironment

__all__ = [
    "Batches",
    "Records",
    "Rows",
    "StageError",
    "dead_letter_sink",
    "enrich",
    "kafka_sink",
    "kafka_source",
    "late_record_sink",
    "parse",
    "parse_and_enrich",
    "parse_for_enrichment",
    "raw_kafka_sink",
    "records",
    "require",
    "window_counts",
]


class StageError(TypeError):
    """A job built wrongly (a stream of the wrong shape, a uid or transactional-id prefix
    used twice): raised while `build` runs, before anything starts; says what to call."""


@dataclass
class JobGraph:
    """What the stages of one environment have claimed, so that a second use of a name
    fails while the job is built (Flink would refuse a duplicate uid only at submission,
    and two exactly-once sinks sharing a prefix only fence each other at run time)."""

    # The sizing the environment was made for (pipelines.running.wiring): the source sizes
    # its polls by it.
    sized_for: tuple[str, ...] = ()
    # The client factory of every enrichment stage wired, as the job passed it: preflight
    # checks each one's service, and the job is sized for slow lookups.
    lookup_clients: list[ClientFactory] = field(default_factory=list)
    uids: set[str] = field(default_factory=set)
    transactional_ids: dict[str, str] = field(default_factory=dict)
    # pipelines.testing: the source's rows from a list, and every sink's stream collected
    # (sink name, stream, raw rows?) instead of written to Kafka.
    test_rows: list | None = None
    collected: list[tuple[str, Any, bool]] | None = None
    # pipelines.testing: the client factory every enrichment stage uses instead of the
    # job's (a test double), so the job's own tests survive a change of its client.
    lookup_double: ClientFactory | None = None

    def claim(self, uid: str) -> str:
        if uid in self.uids:
            raise StageError(
                f"two operators with uid {uid!r}: pass another name= to the second stage "
                f"(a savepoint maps state by uid, so each must be unique)"
            )
        self.uids.add(uid)
        return uid

    def claim_transactional_id(self, prefix: str, sink: str) -> None:
        other = self.transactional_ids.get(prefix)
        if other is not None:
            raise StageError(
                f"sinks {other!r} and {sink!r} share the transactional-id prefix {prefix!r}: "
                f"give one another id_suffix= (exactly-once sinks sharing one fence each other)"
            )
        self.transactional_ids[prefix] = sink

    def uses(self) -> tuple[str, ...]:
        """The external services the stages wired so far call ("enrichment")."""
        return ("enrichment",) if self.lookup_clients else ()


_GRAPHS: weakref.WeakKeyDictionary[Any, JobGraph] = weakref.WeakKeyDictionary()


def graph_of(env: StreamExecutionEnvironment) -> JobGraph:
    """The stages' record of one environment's job (pipelines.testing sets its test mode)."""
    return _GRAPHS.setdefault(env, JobGraph())


@dataclass(frozen=True)
class _Shaped:
    """A DataStream of a known shape, with the job graph it belongs to."""

    stream: DataStream
    graph: JobGraph

    shape = "a stream"

    def derive(self: S, stream: DataStream) -> S:
        """Your own operator's output, in this shape (name and uid it yourself)."""
        return type(self)(stream, self.graph)


S = TypeVar("S", bound=_Shaped)


class Rows(_Shaped):
    """Kafka source rows (topic, partition, offset, timestamp, key, value, headers)."""

    shape = "Rows (the Kafka source's rows)"


class Batches(_Shaped):
    """Each element one string of JSON lines: a batched Python stage's answer."""

    shape = "Batches (each element a batch of JSON lines)"


class Records(_Shaped):
    """One JSON text record per element."""

    shape = "Records (one JSON text record per element)"


def _expect(value: object, wanted: type[_Shaped], stage: str, fix: str) -> None:
    if isinstance(value, wanted):
        return
    got = value.shape if isinstance(value, _Shaped) else f"a {type(value).__name__}"
    raise StageError(f"{stage} takes {wanted.shape}, got {got}: {fix}")


_FIX_RECORDS = "pass it through stages.records(...) first"
_FIX_ROWS = "give it the stream stages.kafka_source(env, settings) returned"


def require(settings: Settings, key: str, why: str, when: str | None = None) -> None:
    """A setting this job cannot run without (e.g. a dead-letter topic): a config error
    naming the key, before anything starts."""
    value: object = settings
    for part in key.split("."):
        value = getattr(value, part)
    if not value:
        raise ConfigError(f"{key}: required {when or f'by the {settings.job.name} job'}; {why}")


# ------------------------------------------------------------------ Kafka in and out


def kafka_source(
    env: StreamExecutionEnvironment, settings: Settings, *, name: str = "kafka-source"
) -> Rows:
    """The configured Kafka source: raw bytes, no watermarks yet. Its polls are sized for
    what the job calls (`JobGraph.sized_for`)."""
    from pyflink.common import WatermarkStrategy

    graph = graph_of(env)
    if graph.test_rows is not None:  # pipelines.testing: rows from a list, no Kafka
        stream = env.from_collection(graph.test_rows, type_info=origin_type_info()).name(name)
        return Rows(stream.uid(graph.claim(name)), graph)
    stream = env.from_source(
        build_source(settings, graph.sized_for),
        WatermarkStrategy.no_watermarks(),
        name,
        type_info=origin_type_info(),
    ).uid(graph.claim(name))
    return Rows(stream, graph)


def _write(
    stream: DataStream,
    graph: JobGraph,
    settings: Settings,
    name: str,
    id_suffix: str,
    make_sink: Callable[[], Any],
    raw: bool = False,
) -> None:
    """Every sink's one way out: its uid and (exactly-once) transactional-id prefix claimed,
    then `stream` written with `make_sink()`, or under pipelines.testing kept for
    collection instead (no Kafka sink is built)."""
    graph.claim(name)
    if settings.sink.delivery is DeliveryGuarantee.EXACTLY_ONCE:
        graph.claim_transactional_id(f"{settings.sink.transactional_id_prefix}{id_suffix}", name)
    if graph.collected is not None:
        graph.collected.append((name, stream, raw))
        return
    stream.sink_to(make_sink()).name(name).uid(name)


def kafka_sink(
    records: Records,
    settings: Settings,
    key_field: str | None = None,
    *,
    name: str = "kafka-sink",
    topic: str | None = None,
    id_suffix: str | None = None,
) -> None:
    """JSON text records to `topic` (default `sink.topic`), with the configured delivery
    guarantee; each keeps its input record's key, headers and timestamp where parse carried
    them, or takes its key from `key_field` (else `sink.key_field`). A sink named other
    than the default takes `-<name>` as its transactional-id suffix unless given one."""
    _expect(records, Records, "kafka_sink", _FIX_RECORDS)
    suffix = id_suffix if id_suffix is not None else ("" if name == "kafka-sink" else f"-{name}")
    _write(records.stream, records.graph, settings, name, suffix,
           lambda: build_sink(settings, topic, id_suffix=suffix, key_field=key_field))  # fmt: skip


def raw_kafka_sink(
    rows: Rows,
    settings: Settings,
    *,
    name: str = "kafka-sink",
    topic: str | None = None,
    id_suffix: str = "",
) -> None:
    """Source rows to `topic` (default `sink.topic`) byte for byte (key, value, headers,
    timestamp), in the JVM."""
    _expect(rows, Rows, "raw_kafka_sink", _FIX_ROWS)
    _write(rows.stream, rows.graph, settings, name, id_suffix,
           lambda: build_raw_sink(settings, topic, id_suffix=id_suffix), raw=True)  # fmt: skip


def dead_letter_sink(
    settings: Settings,
    *streams: Records,
    name: str = "dead-letter-sink",
    topic: str | None = None,
    id_suffix: str = "-dlq",
) -> None:
    """Every stage's dead letters to `topic` (default `sink.dead_letter_topic`), with its
    own transactional ids."""
    if not streams:
        raise StageError("dead_letter_sink needs at least one stream of dead letters")
    for stream in streams:
        _expect(stream, Records, "dead_letter_sink", "hand it the dead letters a stage returned")
    first, rest = streams[0], streams[1:]
    dead = first.stream.union(*(s.stream for s in rest)) if rest else first.stream
    topic = topic or settings.sink.dead_letter_topic
    _write(dead, first.graph, settings, name, id_suffix,
           lambda: build_sink(settings, topic, id_suffix=id_suffix))  # fmt: skip


def late_record_sink(
    late: Records,
    settings: Settings,
    *,
    name: str = "late-sink",
    topic: str | None = None,
    id_suffix: str = "-late",
) -> None:
    """Records later than their window's allowed lateness to `topic` (default
    `window.late_topic`)."""
    _expect(late, Records, "late_record_sink", "hand it the late records window_counts returned")
    topic = topic or settings.window.late_topic
    _write(late.stream, late.graph, settings, name, id_suffix,
           lambda: build_sink(settings, topic, id_suffix=id_suffix))  # fmt: skip


# ------------------------------------------------------------------ Python stages


def batch_records(
    rows: Rows,
    size: int,
    delay_ms: int,
    *,
    name: str = "batch",
    columns: bool = False,
    drain_markers: bool = False,
) -> Rows:
    """Insert the Java RecordBatcher (jars/src): rows -> lists of up to `size` rows, flushed
    after `delay_ms`, before every checkpoint barrier (so exactly-once is untouched) and
    before every watermark (so no record is made late by waiting in a batch). The result
    feeds a batched Python stage only. With `columns` (thread mode) each batch is one row
    of columns instead (Java ColumnBatcher; flink/rows.py column_rows reads it). With
    `drain_markers` an empty batch follows each of those flushes, and a quiet spell: the
    signal for a stage that keeps work in flight to emit it all (the flowing enrichment)."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm.pipelines.flink
    j_stream = java_stream(rows.stream)
    if columns:
        batched_type = jvm.ColumnBatcher.outputType()
        batcher = jvm.ColumnBatcher(size, delay_ms, drain_markers)
    else:
        batched_type = jvm.RecordBatcher.outputType(j_stream.getType())
        batcher = jvm.RecordBatcher(size, delay_ms, drain_markers)
    j_batched = j_stream.transform("batch", batched_type, batcher)
    return rows.derive(python_stream(j_batched).name(name).uid(rows.graph.claim(name)))


def parse(
    raw: Rows,
    settings: Settings,
    *,
    name: str = "parse",
    batch_size: int | None = None,
    batch_delay: int | None = None,
    event_time_field: str | None = None,
    extra_required: dict[str, FieldType] | None = None,
    carry_metadata: bool = True,
) -> tuple[Batches, Records]:
    """Kafka rows -> valid JSON records, and dead letters (pipelines.records.parse). Returns
    (parsed, dead letters). With `carry_metadata` each record line carries its Kafka key,
    headers and timestamp to the sink (`lines.with_meta`); turn it off when the records go
    to JVM stages that read the JSON (window counts).

    By default in batches (`python.batch_size`/`batch_delay` unless given): `parsed` is
    Batches; `records(parsed)` gives Records, or hand the batches straight to `enrich`.
    The operators' uids derive from `name` (`batch`, `parse`, `parse-dead-letters` for the
    default), and its dead letters name it as their stage."""
    from pyflink.common import Types

    _expect(raw, Rows, "parse", _FIX_ROWS)
    graph = raw.graph
    # Thread mode: PyFlink 2.2.1 hands a list of rows over as one reused row repeated
    # (flink/rows.py column_rows), so its batches are one row of columns.
    columns = settings.python.execution_mode is ExecutionMode.THREAD
    parse_fn, dead_letters_tag = make_parse_function(
        settings.parse,
        settings.faults,
        settings.job.name,
        event_time_field=event_time_field,
        max_future_skew=settings.watermarks.max_future_skew if event_time_field else None,
        columns=columns,
        errors=settings.errors,
        extra_required=extra_required,
        dead_letter_max_bytes=settings.sink.dead_letter_bytes(settings.kafka),
        carry_metadata=carry_metadata,
        stage=name,
    )
    rows = batch_records(
        raw,
        batch_size or settings.python.batch_size,
        settings.python.batch_delay if batch_delay is None else batch_delay,
        name="batch" if name == "parse" else f"{name}-batch",
        columns=columns,
    )
    parsed = rows.stream.process(parse_fn, output_type=Types.STRING())
    parsed = parsed.name(name).uid(graph.claim(name))
    # PyFlink's get_side_output adds an identity map of its own: named and given a uid here,
    # so that every operator of a job keeps its identity across savepoints.
    dead_name = f"{name}-dead-letters"
    dead = parsed.get_side_output(dead_letters_tag).name(dead_name).uid(graph.claim(dead_name))
    return Batches(parsed, graph), Records(dead, graph)


def parse_for_enrichment(
    raw: Rows, settings: Settings, *, name: str = "parse"
) -> tuple[Batches, Records]:
    """`parse` shaped for the enrichment stage: batches of `enrichment.batch_size`."""
    cfg = settings.enrichment
    return parse(
        raw,
        settings,
        name=name,
        batch_size=cfg.effective_batch_size(),
        batch_delay=cfg.batch_delay,
    )


def records(batches: Batches, name: str = "records") -> Records:
    """Batches of JSON lines -> one element per record (pipelines.flink.SplitLines)."""
    if isinstance(batches, Records):
        raise StageError("records(...) takes Batches, got Records: they are records already")
    _expect(batches, Batches, "records", "hand it what a batched stage (parse) returned")
    stream = split_in_jvm(batches.stream, keep_marked=False).name(name)
    return Records(stream.uid(batches.graph.claim(name)), batches.graph)


def enrich(
    parsed: Batches,
    settings: Settings,
    lookup_client: ClientFactory,
    *,
    name: str = "enrich",
) -> tuple[Records, Records]:
    """The batched enrichment stage (pipelines.lookups.enrichment) over the batches
    `parse_for_enrichment` produced, looking records up with the client
    `lookup_client(settings)` returns (pipelines.lookups). Returns (enriched records, dead
    letters); uids `enrich`, `enriched`, `enrich-dead-letters` by default, else `<name>`,
    `<name>-records`, `<name>-dead-letters`."""
    if settings.enrichment.operator is EnrichmentOperator.FLOWING:
        raise StageError(
            "enrich: enrichment.operator: flowing runs as one stage with its parse (its "
            "batcher tells it when to drain): use stages.parse_and_enrich(raw, settings, "
            "lookup_client), or enrichment.operator: batched to compose parse_for_enrichment "
            "and enrich"
        )
    _expect(
        parsed,
        Batches,
        f"enrich (enrichment.operator: {settings.enrichment.operator.value})",
        "build its input with stages.parse_for_enrichment(raw, settings)",
    )
    graph = parsed.graph
    graph.lookup_clients.append(lookup_client)
    out, dead = apply_enrichment(
        parsed.stream,
        settings,
        graph.lookup_double or lookup_client,
        uids=_enrichment_uids(graph, name, "enrich"),
    )
    return Records(out, graph), Records(dead, graph)


def parse_and_enrich(
    raw: Rows,
    settings: Settings,
    lookup_client: ClientFactory,
    *,
    name: str = "parse-enrich",
) -> tuple[Records, Records]:
    """`parse_for_enrichment` then `enrich`, with the batched operator as ONE Python stage
    (pipelines.lookups.enrichment.make_parse_enrich_function): each batch of rows crosses to the
    Python worker once, is parsed, looked up and answered, where two stages hand it across
    twice and parse every record twice. Returns (enriched records, dead letters of both
    steps, each naming its step). uids `batch`, `parse-enrich`, `enriched`,
    `enrich-dead-letters` by default, else `<name>-batch`, `<name>`, `<name>-records`,
    `<name>-dead-letters`."""
    cfg = settings.enrichment
    default = name == "parse-enrich"
    _expect(raw, Rows, "parse_and_enrich", _FIX_ROWS)
    graph = raw.graph
    flowing = cfg.operator is EnrichmentOperator.FLOWING
    batches = batch_records(
        raw,
        cfg.effective_batch_size(),
        cfg.batch_delay,
        name="batch" if default else f"{name}-batch",
        columns=flowing and settings.python.execution_mode is ExecutionMode.THREAD,
        drain_markers=flowing,
    )
    # Its own uid, not `enrich`'s: its state (the batches in flight) holds rows, not the
    # parsed text an `enrich` stage holds, so a savepoint of the two-stage graph must not
    # be restored into it as if it were the same operator.
    uids = _enrichment_uids(graph, name, "parse-enrich")
    graph.lookup_clients.append(lookup_client)
    out, dead = apply_enrichment(
        batches.stream,
        settings,
        graph.lookup_double or lookup_client,
        uids=uids,
        parse_first=True,
        make_flowing=make_flowing_function,
    )
    return Records(out, graph), Records(dead, graph)


def _enrichment_uids(graph: JobGraph, name: str, default: str) -> tuple[str, str, str]:
    """An enrichment stage's uids (the stage, its records, its dead letters), claimed: the
    ones running jobs have under the `default` name, so savepoints keep mapping, else
    derived from `name`."""
    if name == default:
        uids = (default, "enriched", "enrich-dead-letters")
    else:
        uids = (name, f"{name}-records", f"{name}-dead-letters")
    return graph.claim(uids[0]), graph.claim(uids[1]), graph.claim(uids[2])


def window_counts(
    parsed_records: Records, settings: Settings, *, name: str = "window"
) -> tuple[Records, Records]:
    """Event time with watermarks (idleness from config), key, tumbling window, count, all
    in the JVM. Returns (counts, late records); uids `event-time`, `count-per-window`,
    `late-record` by default, else prefixed with `<name>-`."""
    _expect(parsed_records, Records, "window_counts", _FIX_RECORDS)
    graph = parsed_records.graph
    win, wm = settings.window, settings.watermarks
    timed, counts, late = window_counts_in_jvm(
        parsed_records.stream,
        watermark_strategy(wm),
        win.key_field,
        wm.event_time_field,
        win.size,
        win.allowed_lateness,
    )
    prefix = "" if name == "window" else f"{name}-"
    for stream, uid in ((timed, "event-time"), (counts, "count-per-window"), (late, "late-record")):
        stream.name(f"{prefix}{uid}").uid(graph.claim(f"{prefix}{uid}"))
    return Records(counts, graph), Records(late, graph)
