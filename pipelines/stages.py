"""The named stages every job is built from, so a job file reads as its pipeline:

    raw = stages.kafka_source(env, settings)
    parsed, bad = stages.parse(raw, settings)
    enriched, failed = stages.enrich(parsed, settings, lookup_client)
    stages.kafka_sink(enriched, settings)
    stages.dead_letter_sink(settings, bad, failed)

Each builder names its operators and gives them stable uids (a savepoint maps state by
uid, so renaming one is a breaking change for running jobs).

The batch contract. Records cross from the JVM into Python in batches and come back as
one element per batch: PyFlink's cost is per element, so a batch of 500 pays it once.
`batch_records` (Java RecordBatcher) turns rows into lists of rows; a batched Python stage
answers each list with ONE string, its records as lines (the line format is
pipelines.lines). `records(batches)` (Java SplitLines) turns such a stream back into one
element per record, in the JVM.
"""

from __future__ import annotations

from pipelines.settings import ConfigError, FieldType, Settings


def require(settings: Settings, key: str, why: str, when: str | None = None) -> None:
    """A setting this job cannot run without (e.g. a dead-letter topic): a config error
    naming the key, before anything starts."""
    value: object = settings
    for part in key.split("."):
        value = getattr(value, part)
    if not value:
        raise ConfigError(f"{key}: required {when or f'by the {settings.job.name} job'}; {why}")


# ------------------------------------------------------------------ Kafka in and out


def kafka_source(env, settings: Settings, uses: tuple[str, ...] = ()):
    """The configured Kafka source: rows (topic, partition, offset, timestamp, key, value),
    raw bytes, no watermarks yet. `uses` is the job's USES (lookups size its polls)."""
    from pyflink.common import WatermarkStrategy

    from pipelines.kafka import build_source, origin_type_info

    return env.from_source(
        build_source(settings, uses),
        WatermarkStrategy.no_watermarks(),
        "kafka-source",
        type_info=origin_type_info(),
    ).uid("kafka-source")


def kafka_sink(records, settings: Settings, key_field: str | None = None) -> None:
    """JSON text records to the sink topic, with the configured delivery guarantee; each
    keeps its input record's key, headers and timestamp where parse carried them, or takes
    its key from `key_field` (else `sink.key_field`)."""
    from pipelines.kafka import build_sink

    (
        records.sink_to(build_sink(settings, key_field=key_field))
        .name("kafka-sink")
        .uid("kafka-sink")
    )


def raw_kafka_sink(rows, settings: Settings) -> None:
    """Source rows to the sink topic byte for byte (key, value, headers, timestamp), in the
    JVM."""
    from pipelines.kafka import build_raw_sink

    rows.sink_to(build_raw_sink(settings)).name("kafka-sink").uid("kafka-sink")


def dead_letter_sink(settings: Settings, *streams) -> None:
    """Every stage's dead letters to `sink.dead_letter_topic` (its own transactional ids)."""
    from pipelines.kafka import build_sink

    dead = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
    (
        dead.sink_to(build_sink(settings, settings.sink.dead_letter_topic, id_suffix="-dlq"))
        .name("dead-letter-sink")
        .uid("dead-letter-sink")
    )


def late_record_sink(late, settings: Settings) -> None:
    from pipelines.kafka import build_sink

    (
        late.sink_to(build_sink(settings, settings.window.late_topic, id_suffix="-late"))
        .name("late-sink")
        .uid("late-sink")
    )


# ------------------------------------------------------------------ Python stages


def batch_records(stream, size: int, delay_ms: int):
    """Insert the Java RecordBatcher (jars/src): rows -> lists of up to `size` rows, flushed
    after `delay_ms`, before every checkpoint barrier (so exactly-once is untouched) and
    before every watermark (so no record is made late by waiting in a batch)."""
    from pyflink.java_gateway import get_gateway

    from pipelines.flink_compat import java_stream, python_stream

    batcher = get_gateway().jvm.pipelines.flink.RecordBatcher
    j_stream = java_stream(stream)
    j_batched = j_stream.transform(
        "batch", batcher.outputType(j_stream.getType()), batcher(size, delay_ms)
    )
    return python_stream(j_batched)


def parse(
    raw,
    settings: Settings,
    *,
    batch_size: int | None = None,
    batch_delay: int | None = None,
    per_record: bool = False,
    event_time_field: str | None = None,
    trace_timing: bool = False,
    extra_required: dict[str, FieldType] | None = None,
    carry_metadata: bool = True,
):
    """Kafka rows -> valid JSON records, and dead letters (pipelines.parse). Returns
    (parsed, dead letters). With `carry_metadata` each record line carries its Kafka key,
    headers and timestamp to the sink (`with_meta`); turn it off when the records go to JVM
    stages that read the JSON (window counts).

    By default in batches (`python.batch_size`/`batch_delay` unless given): `parsed` holds
    batches (see the batch contract above); `records(parsed)` gives one record per
    element, or hand the batches straight to `enrich`. `per_record` parses one element per
    record, for the comparison operators only."""
    from pyflink.common import Types

    from pipelines.parse import make_parse_function

    parse_fn, dead_letters_tag = make_parse_function(
        settings.parse,
        settings.faults,
        settings.job.name,
        event_time_field=event_time_field,
        max_future_skew=settings.watermarks.max_future_skew if event_time_field else None,
        batched=not per_record,
        trace_timing=trace_timing,
        errors=settings.errors,
        extra_required=extra_required,
        dead_letter_max_bytes=settings.sink.dead_letter_bytes(settings.kafka),
        carry_metadata=carry_metadata,
    )
    if not per_record:
        raw = (
            batch_records(
                raw,
                batch_size or settings.python.batch_size,
                settings.python.batch_delay if batch_delay is None else batch_delay,
            )
            .name("batch")
            .uid("batch")
        )
    parsed = raw.process(parse_fn, output_type=Types.STRING()).name("parse").uid("parse")
    # PyFlink's get_side_output adds an identity map of its own: named and given a uid here,
    # so that every operator of a job keeps its identity across savepoints.
    dead = parsed.get_side_output(dead_letters_tag).name("parse-dead-letters")
    return parsed, dead.uid("parse-dead-letters")


def parse_for_enrichment(raw, settings: Settings):
    """`parse` shaped for the enrichment stage: batches of `enrichment.batch_size` for the
    batched operator, single records for the per-record comparison operators."""
    from pipelines.settings import EnrichmentOperator

    cfg = settings.enrichment
    if cfg.operator is EnrichmentOperator.BATCHED:
        return parse(
            raw,
            settings,
            batch_size=cfg.effective_batch_size(),
            batch_delay=cfg.batch_delay,
            trace_timing=cfg.trace_timing,
        )
    return parse(raw, settings, per_record=True, trace_timing=cfg.trace_timing)


def records(batches, name: str = "records"):
    """Batches of JSON lines -> one element per record (pipelines.flink.SplitLines)."""
    from pipelines.flink_compat import split_lines as split_in_jvm

    return split_in_jvm(batches, keep_marked=False).name(name).uid(name)


def enrich(parsed, settings: Settings, client_factory):
    """The async enrichment stage (pipelines.enrichment) over what `parse_for_enrichment`
    produced, looking records up with `client_factory(settings)` (pipelines.lookups).
    Returns (enriched records, dead letters)."""
    from pipelines.enrichment import apply_enrichment

    return apply_enrichment(parsed, settings, client_factory)


def window_counts(parsed_records, settings: Settings):
    """Event time with watermarks (idleness from config), key, tumbling window, count, all
    in the JVM. Returns (counts, late records)."""
    from pipelines.flink_compat import window_counts_in_jvm
    from pipelines.watermarks import watermark_strategy

    win, wm = settings.window, settings.watermarks
    timed, counts, late = window_counts_in_jvm(
        parsed_records,
        watermark_strategy(wm),
        win.key_field,
        wm.event_time_field,
        win.size,
        win.allowed_lateness,
    )
    timed.name("event-time").uid("event-time")
    counts.name("count-per-window").uid("count-per-window")
    return counts, late.name("late-record").uid("late-record")
