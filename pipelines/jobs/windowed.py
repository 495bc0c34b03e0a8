"""Counts per key in tumbling event-time windows, exactly once, with idle partitions handled.

Kafka -> parse (bad records to dead letters) -> event time + watermarks (idleness from
config) -> key -> tumbling window -> count -> Kafka; records later than the window's
allowed lateness go to the late-records topic, never silently dropped.
"""

from __future__ import annotations

import json
import sys

from pipelines.settings import ConfigError, FieldType, Settings


def build(env, settings: Settings) -> None:
    from pyflink.common import Time, Types, WatermarkStrategy
    from pyflink.datastream import OutputTag
    from pyflink.datastream.functions import ProcessWindowFunction
    from pyflink.datastream.window import TumblingEventTimeWindows

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
    # The window key is checked here, where a bad record can still go to dead letters:
    # key_by below then never meets a record without a usable key.
    batches, dead = parse_in_batches(raw, settings, settings.python.batch_size,
                                     settings.python.batch_delay, event_time_field=time_field,
                                     extra_required={key_field: FieldType.ANY})
    timed = (records(batches).assign_timestamps_and_watermarks(watermark_strategy(wm))
             .name("event-time").uid("event-time"))

    class CountWindow(ProcessWindowFunction):
        def process(self, key, context, elements):
            window = context.window()
            yield json.dumps({"key": key, "window_start": window.start,
                              "window_end": window.end, "count": sum(1 for _ in elements)},
                             sort_keys=True)

    late_tag = OutputTag("late-records", Types.STRING())
    counts = (timed
              .key_by(lambda value: window_key(value, key_field), key_type=Types.STRING())
              .window(TumblingEventTimeWindows.of(Time.milliseconds(win.size)))
              .allowed_lateness(win.allowed_lateness)
              .side_output_late_data(late_tag)
              .process(CountWindow(), Types.STRING())
              .name("count-per-window").uid("count-per-window"))
    counts.sink_to(build_sink(settings)).name("kafka-sink").uid("kafka-sink")
    (counts.get_side_output(late_tag)
     .map(lambda value: _late(value, key_field, time_field), output_type=Types.STRING())
     .name("late-record").uid("late-record")
     .sink_to(build_sink(settings, win.late_topic, id_suffix="-late"))
     .name("late-sink").uid("late-sink"))
    (dead
     .sink_to(build_sink(settings, settings.sink.dead_letter_topic, id_suffix="-dlq"))
     .name("dead-letter-sink").uid("dead-letter-sink"))


def window_key(value: str, key_field: str) -> str:
    """The key as text: a string as it is, anything else as its JSON (1 and "1" differ)."""
    key = json.loads(value)[key_field]
    return key if isinstance(key, str) else json.dumps(key, sort_keys=True)


def _late(value: str, key_field: str, time_field: str) -> str:
    record = json.loads(value)
    return json.dumps({"key": record.get(key_field), "event_time": record.get(time_field),
                       "reason": "later than the window's allowed lateness", "record": record},
                      sort_keys=True)


def main(argv: list[str] | None = None) -> None:
    from pipelines.runner import job_main

    job_main("windowed", build, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
