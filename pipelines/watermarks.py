"""Settings -> WatermarkStrategy: bounded out-of-orderness that keeps moving when idle.

The watermark downstream of parallel subtasks is the minimum over them; a subtask whose
partitions go quiet holds every window open (FLINK-5479) unless it declares itself idle.
Two PyFlink facts shape this module: `with_idleness` returns a new strategy *without*
the timestamp assigner, so the assigner is set last; and `from_source` ignores a Python
timestamp assigner, so jobs apply this with `assign_timestamps_and_watermarks` after the
source.
"""

from __future__ import annotations

import json

from pipelines.settings import WatermarkSettings


def watermark_strategy(cfg: WatermarkSettings):
    from pyflink.common import Duration
    from pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy

    field = cfg.event_time_field

    class EventTime(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp: int) -> int:
            return int(json.loads(value)[field])

    strategy = WatermarkStrategy.for_bounded_out_of_orderness(
        Duration.of_millis(cfg.max_out_of_orderness))
    if cfg.idleness:
        strategy = strategy.with_idleness(Duration.of_millis(cfg.idleness))
    return strategy.with_timestamp_assigner(EventTime())  # last: with_idleness drops it
