"""Counts per key in tumbling event-time windows, exactly once, with idle partitions handled.

Kafka -> parse (Python, in batches; bad records to dead letters) -> event time + watermarks
(idleness from config) -> key -> tumbling window -> count -> Kafka; records later than the
window's allowed lateness go to the late-records topic, never silently dropped. Only parse
runs in Python: event time, key, window and count run in the JVM on the records parse
accepted (watermarks.py, flink_compat.window_counts_in_jvm).
"""

from __future__ import annotations

import sys

from pipelines.settings import ConfigError, FieldType, Settings


def build(env, settings: Settings) -> None:
    from pyflink.common import WatermarkStrategy

    from pipelines.flink_compat import window_counts_in_jvm
    from pipelines.kafka import build_sink, build_source, origin_type_info
    from pipelines.stages import parse_in_batches, records
    from pipelines.watermarks import watermark_strategy

    for key, value in (("sink.dead_letter_topic", settings.sink.dead_letter_topic),
                       ("window.late_topic", settings.window.late_topic)):
        if not value:
            raise ConfigError(f"{key}: required by the windowed job; records must never be "
                              f"silently dropped")
    win, wm = settings.window, settings.watermarks
    key_field, time_field = win.key_field, wm.event_time_field

    raw = env.from_source(build_source(settings), WatermarkStrategy.no_watermarks(),
                          "kafka-source", type_info=origin_type_info()).uid("kafka-source")
    # The window key and event time are checked here, where a bad record can still go to
    # dead letters: the JVM stages below never meet a record without them.
    batches, dead = parse_in_batches(raw, settings, settings.python.batch_size,
                                     settings.python.batch_delay, event_time_field=time_field,
                                     extra_required={key_field: FieldType.ANY})
    timed, counts, late = window_counts_in_jvm(
        records(batches), watermark_strategy(wm), key_field, time_field, win.size,
        win.allowed_lateness)
    timed.name("event-time").uid("event-time")
    counts.name("count-per-window").uid("count-per-window")
    counts.sink_to(build_sink(settings)).name("kafka-sink").uid("kafka-sink")
    (late.name("late-record").uid("late-record")
     .sink_to(build_sink(settings, win.late_topic, id_suffix="-late"))
     .name("late-sink").uid("late-sink"))
    (dead.sink_to(build_sink(settings, settings.sink.dead_letter_topic, id_suffix="-dlq"))
     .name("dead-letter-sink").uid("dead-letter-sink"))


def main(argv: list[str] | None = None) -> None:
    from pipelines.runner import job_main

    job_main("windowed", build, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
