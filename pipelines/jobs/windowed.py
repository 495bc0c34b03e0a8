"""Counts per key in tumbling event-time windows, exactly once, with idle partitions handled.

Kafka -> parse (Python, in batches; bad records to dead letters) -> event time + watermarks
(idleness from config) -> key -> tumbling window -> count -> Kafka; records later than the
window's allowed lateness go to the late-records topic, never silently dropped. Only parse
runs in Python: event time, key, window and count run in the JVM on the records parse
accepted (watermarks.py, flink/streams.py window_counts_in_jvm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.api import FieldType, Job, Settings, stages

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment


def build(env: StreamExecutionEnvironment, settings: Settings) -> None:
    for key in ("sink.dead_letter_topic", "window.late_topic"):
        stages.require(settings, key, "records must never be silently dropped")
    raw = stages.kafka_source(env, settings)
    # The window key and event time are checked here, where a bad record can still go to
    # dead letters: the JVM stages below never meet a record without them.
    parsed, bad_records = stages.parse(
        raw,
        settings,
        event_time_field=settings.watermarks.event_time_field,
        extra_required={settings.window.key_field: FieldType.ANY},
        carry_metadata=False,  # a count is no one input record's: no key, headers to carry
    )
    counts, late = stages.window_counts(stages.records(parsed), settings)
    stages.kafka_sink(counts, settings, key_field="key")  # keyed by the window key
    stages.late_record_sink(late, settings)
    stages.dead_letter_sink(settings, bad_records)


job = Job(build)

if __name__ == "__main__":
    job.main()
