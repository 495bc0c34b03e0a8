"""Settings -> WatermarkStrategy: bounded out-of-orderness that keeps moving when idle.

The watermark downstream of parallel subtasks is the minimum over them; a subtask whose
partitions go quiet holds every window open (FLINK-5479) unless it declares itself idle.
The strategy is Flink's own, built in the JVM, with the record's event time read by
pipelines.flink.JsonEventTime: a Python timestamp assigner would cost a Python call per
record. The assigner is set last (a strategy derived after it could drop it, as PyFlink's
`with_idleness` does), and the strategy is applied after the parse stage, which has
dead-lettered every record without a usable event time.
"""

from __future__ import annotations

from pipelines.settings import WatermarkSettings


def watermark_strategy(cfg: WatermarkSettings):
    """A Java WatermarkStrategy<String> over JSON records."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    duration = jvm.java.time.Duration.ofMillis
    strategy = jvm.org.apache.flink.api.common.eventtime.WatermarkStrategy.forBoundedOutOfOrderness(
        duration(cfg.max_out_of_orderness)
    )
    if cfg.idleness:
        strategy = strategy.withIdleness(duration(cfg.idleness))
    return strategy.withTimestampAssigner(jvm.pipelines.flink.JsonEventTime(cfg.event_time_field))
