"""Committed offsets, log-end offsets and lag of a consumer group, read from the broker.

What people otherwise write by hand with AdminClient: watch a Flink job's group commit as
checkpoints complete. It only reads; it never joins the group.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from pipelines.kafka.clients import admin_client

NO_OFFSET = -1001


@dataclass
class PartitionRow:
    topic: str
    partition: int
    committed: int | None
    log_end: int
    lag: int | None
    last_moved: float | None  # epoch seconds when the committed offset last changed

    def as_dict(self) -> dict:
        return asdict(self)


class OffsetWatcher:
    def __init__(self, broker: str | dict, group: str, topics: list[str] | None = None):
        """`broker`: a bootstrap string, or a librdkafka config (TLS, SASL) holding one."""
        self.conf = {"bootstrap.servers": broker} if isinstance(broker, str) else dict(broker)
        self.bootstrap = self.conf["bootstrap.servers"]
        self.group = group
        self.topics = list(topics or [])
        extra = {k: v for k, v in self.conf.items() if k != "bootstrap.servers"}
        self.admin = admin_client(self.bootstrap, extra)
        self._seen: dict[tuple[str, int], tuple[int | None, float | None]] = {}

    def _committed(self) -> dict[tuple[str, int], int]:
        request = [ConsumerGroupTopicPartitions(self.group)]
        future = self.admin.list_consumer_group_offsets(request, request_timeout=10)[self.group]
        result = future.result(timeout=15)
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in result.topic_partitions
            if tp.offset != NO_OFFSET
        }

    def _log_ends(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {**self.conf, "group.id": f"{self.group}-probe", "enable.auto.commit": False}
        )
        try:
            return {
                (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)[1]
                for t, p in partitions
            }
        finally:
            consumer.close()

    def poll(self) -> list[PartitionRow]:
        committed = self._committed()
        topics = self.topics or sorted({t for t, _ in committed})
        meta = self.admin.list_topics(timeout=10).topics
        partitions = [(t, p) for t in topics if t in meta for p in sorted(meta[t].partitions)]
        ends = self._log_ends(partitions)
        now = time.time()
        rows = []
        for key in partitions:
            offset = committed.get(key)
            previous, moved = self._seen.get(key, (None, None))
            if offset is not None and offset != previous:
                moved = now if key in self._seen else None
            self._seen[key] = (offset, moved)
            rows.append(
                PartitionRow(
                    key[0],
                    key[1],
                    offset,
                    ends[key],
                    None if offset is None else ends[key] - offset,
                    moved,
                )
            )
        return rows

    def table(self, rows: list[PartitionRow]) -> str:
        stamp = time.strftime("%H:%M:%S")
        lines = [
            f"{stamp} group {self.group}",
            f"{'topic':<30} {'part':>4} {'committed':>10} {'log-end':>10} {'lag':>8}  moved",
        ]
        for r in rows:
            moved = "-" if r.last_moved is None else f"{time.time() - r.last_moved:.0f}s ago"
            lines.append(
                f"{r.topic:<30} {r.partition:>4} "
                f"{'-' if r.committed is None else r.committed:>10} {r.log_end:>10} "
                f"{'-' if r.lag is None else r.lag:>8}  {moved}"
            )
        total = sum(r.lag for r in rows if r.lag is not None)
        lines.append(f"total lag {total}")
        return "\n".join(lines)
