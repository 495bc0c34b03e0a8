"""Topics and records on a real broker: creating, producing and reading back.

Shared by the CLI (demo data), the tests and the benchmarks, so all three talk to Kafka
the same way; the read-back is always `read_committed`, as downstream consumers would.

Each function takes the broker as a bootstrap string or as a librdkafka config (what
`librdkafka_config(settings.kafka)` returns): a secured cluster is the second.
"""

from __future__ import annotations

import time
from typing import Any, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.kafka.clients import admin_client, quiet_logger

_COORDINATOR_NOT_READY = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


Broker = str | dict  # "host:port", or a librdkafka config with bootstrap.servers


class ProduceError(Exception):
    """Records were not written; the message names the topic and the broker's reason."""


class ReadError(Exception):
    """A topic could not be read to its end: it does not exist, or some partition did not
    report its end (the last stable offset, under read_committed) in time. A read never
    returns a partial answer that a test could take for the whole."""


def client_conf(broker: Broker, **extra) -> dict:
    """A librdkafka config for `broker`, with `extra` on top. librdkafka's own log lines
    go to a logger that drops them: raw on stderr ("%4|...|GETPID|... Coordinator load in
    progress: retrying", under a loaded broker) they would break a command's promise of one
    line per error;
    what fails is reported from delivery reports and exceptions instead."""
    base = {"bootstrap.servers": broker} if isinstance(broker, str) else dict(broker)
    return {"logger": quiet_logger(), **base, **extra}


def admin(broker: Broker) -> AdminClient:
    """An admin client that has reached the broker (else BrokerUnreachable, one line)."""
    conf = client_conf(broker)
    return admin_client(conf.pop("bootstrap.servers"), conf)


def create_topics(
    bootstrap: Broker,
    topics: dict[str, int],
    timeout: float = 30.0,
    config: dict[str, str] | None = None,
) -> None:
    """Create each topic with the given partition count, the cluster's default
    replication (default.replication.factor: 3 on the topology, 1 on a single broker) and
    the topic `config` given (for example message.timestamp.type); existing ones are left
    alone."""
    client = admin(bootstrap)
    existing = set(client.list_topics(timeout=timeout).topics)
    wanted = [
        NewTopic(t, num_partitions=n, replication_factor=-1, config=dict(config or {}))
        for t, n in topics.items()
        if t not in existing
    ]
    if not wanted:
        return
    for topic, future in client.create_topics(wanted, request_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    # Wait for the topics created here (an existing one keeps its own partition count),
    # each partition with a leader.
    created = {t.topic: t.num_partitions for t in wanted}
    deadline = time.monotonic() + timeout
    while True:
        meta = client.list_topics(timeout=timeout).topics
        if all(_ready(meta.get(t), n) for t, n in created.items()):
            return
        if time.monotonic() > deadline:
            late = sorted(t for t, n in created.items() if not _ready(meta.get(t), n))
            raise KafkaException(f"topics created but without a leader for every partition "
                                 f"after {timeout:.0f} s: {', '.join(late)}")  # fmt: skip
        time.sleep(0.1)


def _ready(meta, partitions: int) -> bool:
    return (
        meta is not None
        and meta.error is None
        and len(meta.partitions) == partitions
        and all(p.leader >= 0 for p in meta.partitions.values())
    )


def delete_topics(bootstrap: Broker, topics: Iterable[str], timeout: float = 30.0) -> None:
    client = admin(bootstrap)
    existing = set(client.list_topics(timeout=timeout).topics)
    doomed = [t for t in topics if t in existing]
    if doomed:
        for future in client.delete_topics(doomed, request_timeout=timeout).values():
            future.result(timeout=timeout)


def produce(
    bootstrap: Broker,
    topic: str,
    values: Iterable[bytes | str],
    partition: int | None = None,
    timestamps: Iterable[int] | None = None,
    keys: Iterable[bytes | str | None] | None = None,
    headers: Iterable[list[tuple[str, bytes | None]]] | None = None,
    round_robin: bool | None = None,
) -> int:
    """Produce values in order: to one partition when given, else round-robin over all
    partitions (a sticky partitioner would put a fast burst on one), or with `keys` by the
    key's hash unless `round_robin`. Returns the count."""
    producer = Producer(client_conf(bootstrap, **{"enable.idempotence": True, "linger.ms": 5}))
    failed: list = []

    def delivered(err, msg) -> None:
        if err is not None:
            failed.append(err)

    spread = None
    if partition is None and (keys is None if round_robin is None else round_robin):
        # The broker asked may not know a topic just created elsewhere yet (3 brokers on a
        # busy machine: "Unknown topic or partition" a moment after it was created).
        deadline = time.monotonic() + 30
        while True:
            meta = producer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                break
            if time.monotonic() > deadline:
                why = meta.error.str() if meta is not None and meta.error else "not found"
                raise ProduceError(f"produce to {topic}: {why}")
            time.sleep(0.2)
        spread = len(meta.partitions)
    stamps = iter(timestamps) if timestamps is not None else None
    key_iter = iter(keys) if keys is not None else None
    header_iter = iter(headers) if headers is not None else None
    count = 0
    for value in values:
        kwargs: dict[str, Any] = {}
        if partition is not None:
            kwargs["partition"] = partition
        elif spread:
            kwargs["partition"] = count % spread
        if stamps is not None:
            kwargs["timestamp"] = next(stamps)
        if key_iter is not None:
            kwargs["key"] = next(key_iter)
        if header_iter is not None:
            kwargs["headers"] = next(header_iter)
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    remaining = producer.flush(60)
    if failed:
        raise ProduceError(
            f"produce to {topic}: {len(failed)} of {count} record(s) failed: {failed[0].str()}"
        )
    if remaining:
        raise ProduceError(
            f"produce to {topic}: {remaining} of {count} record(s) not delivered within 60 s"
        )
    return count


def read_all(
    bootstrap: Broker, topic: str, isolation: str = "read_committed", timeout_s: float = 60.0
) -> list[bytes]:
    """Every record of a topic, from the beginning to the log end (the LSO for read_committed)."""
    return [m.value() for m in read_messages(bootstrap, topic, isolation, timeout_s)]


def read_messages(
    bootstrap: Broker, topic: str, isolation: str = "read_committed", timeout_s: float = 60.0
) -> list:
    consumer = Consumer(
        client_conf(
            bootstrap,
            **{
                "group.id": f"reader-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": isolation,
                "enable.partition.eof": True,
            },
        )
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            why = meta.error.str() if meta is not None and meta.error is not None else "none"
            raise ReadError(f"topic {topic} does not exist ({why})")
        parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
        consumer.assign(parts)
        done: set[int] = set()
        out = []
        deadline = time.monotonic() + timeout_s
        # Read until every partition has reported its end (the LSO under read_committed),
        # however long the first fetch takes on a busy machine; `timeout_s` bounds it.
        # (Stopping after 3 s without a message returned [] under load.)
        while time.monotonic() < deadline and len(done) < len(parts):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    done.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            done.discard(msg.partition())
            out.append(msg)
        if len(done) < len(parts):
            missing = sorted(set(meta.partitions) - done)
            raise ReadError(
                f"{topic}: partition(s) {missing} did not report their end within "
                f"{timeout_s:.0f} s ({len(out)} records read so far)"
            )
        return out
    finally:
        consumer.close()


def end_offsets(
    bootstrap: Broker, topic: str, isolation: str = "read_uncommitted"
) -> dict[int, int]:
    """Per partition: the log-end offset (read_uncommitted) or last stable offset (read_committed)."""
    consumer = Consumer(
        client_conf(
            bootstrap,
            **{
                "group.id": "offsets-probe",
                "isolation.level": isolation,
                "enable.auto.commit": False,
            },
        )
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        }
    finally:
        consumer.close()


def committed_offsets(
    bootstrap: Broker, group: str, topic: str, retry_s: float = 15.0
) -> dict[int, int]:
    """The group's committed offset per partition, as the broker stores it (-1001: none).

    A fresh broker answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while it creates
    __consumer_offsets; those are retried for up to `retry_s`.
    """
    deadline = time.monotonic() + retry_s
    consumer = Consumer(client_conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        while True:
            try:
                parts = consumer.committed(
                    [TopicPartition(topic, p) for p in meta.partitions], timeout=10
                )
                return {tp.partition: tp.offset for tp in parts}
            except KafkaException as exc:
                error = exc.args[0]
                transient = error.retriable() or error.code() in _COORDINATOR_NOT_READY
                if not transient or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
