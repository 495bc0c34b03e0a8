"""Kafka topic -> Kafka topic, exactly once: the smallest job with every production part.

By default the copy never leaves the JVM: key, value (a null value too) and timestamp are
written as they were read, byte for byte, and no Python worker starts. With
`parse.validate_records: true` each record is parsed and checked (in batches) and bad ones
go to dead letters. Copy this when a job needs no enrichment.
"""

from __future__ import annotations

import sys

from pipelines.settings import ConfigError, Settings


def build(env, settings: Settings) -> None:
    from pyflink.common import WatermarkStrategy

    from pipelines.kafka import build_raw_sink, build_sink, build_source, origin_type_info
    from pipelines.stages import parse_in_batches, records

    raw = env.from_source(
        build_source(settings), WatermarkStrategy.no_watermarks(), "kafka-source",
        type_info=origin_type_info(),
    ).uid("kafka-source")
    if not settings.parse.validate_records:
        raw.sink_to(build_raw_sink(settings)).name("kafka-sink").uid("kafka-sink")
        return
    if not settings.sink.dead_letter_topic:
        raise ConfigError("sink.dead_letter_topic: required when parse.validate_records is "
                          "true; records that fail the check must go somewhere")
    batches, dead = parse_in_batches(raw, settings, settings.python.batch_size,
                                     settings.python.batch_delay)
    records(batches).sink_to(build_sink(settings)).name("kafka-sink").uid("kafka-sink")
    (dead.sink_to(build_sink(settings, settings.sink.dead_letter_topic, id_suffix="-dlq"))
     .name("dead-letter-sink").uid("dead-letter-sink"))


def main(argv: list[str] | None = None) -> None:
    from pipelines.runner import job_main

    job_main("passthrough", build, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
