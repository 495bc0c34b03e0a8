"""Kafka topic -> Kafka topic, exactly once: the smallest job with every production part.

By default the copy never leaves the JVM: key, value (a null value too) and timestamp are
written as they were read, byte for byte, and no Python worker starts. With
`parse.validate_records: true` each record is parsed and checked (in batches) and bad ones
go to dead letters. Copy this when a job needs no enrichment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.api import Job, Settings, stages

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment


def build(env: StreamExecutionEnvironment, settings: Settings) -> None:
    raw = stages.kafka_source(env, settings)
    if not settings.parse.validate_records:
        stages.raw_kafka_sink(raw, settings)
        return
    stages.require(
        settings,
        "sink.dead_letter_topic",
        "records that fail the check must go somewhere",
        when="when parse.validate_records is true",
    )
    parsed, bad_records = stages.parse(raw, settings)
    stages.kafka_sink(stages.records(parsed), settings)
    stages.dead_letter_sink(settings, bad_records)


job = Job(build)

if __name__ == "__main__":
    job.main()
