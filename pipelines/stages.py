"""Stages several jobs share, so a job file reads as its pipeline.

Records cross from the JVM into Python in batches and come back as one element per batch
(one record per line): PyFlink's cost is per element, so a batch of 500 pays it once.
"""

from __future__ import annotations

from pipelines.settings import FieldType, Settings


def batch_records(stream, size: int, delay_ms: int):
    """Insert the Java RecordBatcher (jars/src): rows -> lists of up to `size` rows, flushed
    after `delay_ms` and before every checkpoint barrier (so exactly-once is untouched)."""
    from pyflink.java_gateway import get_gateway

    from pipelines.flink_compat import java_stream, python_stream

    batcher = get_gateway().jvm.pipelines.flink.RecordBatcher
    j_stream = java_stream(stream)
    j_batched = j_stream.transform("batch", batcher.outputType(j_stream.getType()),
                                   batcher(size, delay_ms))
    return python_stream(j_batched)


def parse_in_batches(raw, settings: Settings, batch_size: int, batch_delay: int,
                     event_time_field: str | None = None, trace_timing: bool = False,
                     extra_required: dict[str, FieldType] | None = None):
    """Kafka rows -> batch -> parse (Python, once per batch). Returns (batches, dead
    letters): each batch element holds its valid records as JSON text, one per line;
    `records(batches)` turns them back into one element per record, in the JVM."""
    from pyflink.common import Types

    from pipelines.parse import make_parse_function

    batches = batch_records(raw, batch_size, batch_delay).name("batch").uid("batch")
    parse_fn, dead_letters_tag = make_parse_function(
        settings.parse, settings.faults, settings.job.name, event_time_field=event_time_field,
        batched=True, trace_timing=trace_timing, errors=settings.errors,
        extra_required=extra_required,
        dead_letter_max_bytes=settings.sink.dead_letter_bytes(settings.kafka))
    parsed = batches.process(parse_fn, output_type=Types.STRING()).name("parse").uid("parse")
    return parsed, parsed.get_side_output(dead_letters_tag)


def records(batches, name: str = "records"):
    """Batches of JSON lines -> one element per record (pipelines.flink.SplitLines)."""
    from pipelines.flink_compat import split_lines

    return split_lines(batches, keep_marked=False).name(name).uid(name)
