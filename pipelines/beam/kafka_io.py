"""Kafka I/O for streaming Beam runs, in Python over confluent-kafka: a read that hands its
output on every half second and commits what was written, and a write flushed with the
bundle that wrote it.

The read is an unbounded splittable DoFn per partition. It claims offsets with an
`OffsetRestrictionTracker` and, after READ_SLICE_S or READ_SLICE_RECORDS, defers the rest of
its partition: the bundle ends, so parse, enrich and the writes fused after it (one stage:
nothing between them is a shuffle or a Flatten) write what it read, and Prism resumes the
read from the residual. When the bundle has succeeded (its writes flushed in
`finish_bundle`), Prism calls its finalizer, and the read commits the partition's next
offset to `source.group_id`: a stopped run's restart starts from there. A kill between the
flush and the commit writes that bundle again on restart (at least once).

Credentials never travel in the pickled DoFns: each DoFn carries a token, and the Kafka
client config it stands for stays in this process (the launcher, where the LOOPBACK worker
runs), looked up by `setup()`.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import cast

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.utils.timestamp import Duration

from pipelines.records import jsontext
from pipelines.records.lines import key_of, split_meta
from pipelines.settings import ConfigError, OffsetReset, Settings, StartMode
from pipelines.settings.client_properties import librdkafka_config

READ_SLICE_S = 0.5  # a read bundle's longest: output reaches the writes this often
READ_SLICE_RECORDS = 20_000  # and its most records (what the fused stages hold at once)
POLL_RECORDS = 2_000
POLL_TIMEOUT_S = 0.1
IDLE_RESUME_S = 0.1  # an idle partition is read again after this
FLUSH_TIMEOUT_S = 60.0
END = 2**63 - 1  # an unbounded partition's restriction: from its start offset on

_CONNECTIONS: dict[str, dict[str, str]] = {}  # token -> client config (secrets stay here)


class NoConnection(RuntimeError):
    """A DoFn ran in a process that did not launch the pipeline."""


def connection_token(settings: Settings) -> str:
    """A token standing for the job's Kafka client config, which stays in this process."""
    token = secrets.token_hex(8)
    _CONNECTIONS[token] = librdkafka_config(settings.kafka)
    return token


def _connection(token: str) -> dict[str, str]:
    try:
        return dict(_CONNECTIONS[token])
    except KeyError:
        raise NoConnection(
            "the Kafka connection of this Beam pipeline lives in the process that launched "
            "it: run its workers there (LOOPBACK: Prism or the DirectRunner)"
        ) from None


# ------------------------------------------------------------------ where a read starts


def start_offsets(settings: Settings) -> dict[tuple[str, int], int]:
    """Each partition of `source.topics` and the offset a run starts it at: the group's
    committed offset (else `source.start.fallback`), the earliest, or the first at
    `source.start.timestamp`. ConfigError where the fallback is `fail` and none is committed."""
    from confluent_kafka import Consumer, TopicPartition

    start = settings.source.start
    consumer = Consumer(
        {**_connection(connection_token(settings)), "group.id": settings.source.group_id}
    )
    try:
        partitions = [
            TopicPartition(topic, p)
            for topic in settings.source.topics
            for p in sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ]
        if start.mode is StartMode.TIMESTAMP:
            asked = [TopicPartition(tp.topic, tp.partition, start.timestamp) for tp in partitions]
            found = consumer.offsets_for_times(asked, timeout=30)
            return {(tp.topic, tp.partition): _or_end(consumer, tp) for tp in found}
        if start.mode is StartMode.EARLIEST:
            return {(tp.topic, tp.partition): _bounds(consumer, tp)[0] for tp in partitions}
        committed = consumer.committed(partitions, timeout=30)
        return {
            (tp.topic, tp.partition): _resumed(consumer, tp, start.fallback) for tp in committed
        }
    finally:
        consumer.close()


def _bounds(consumer, tp) -> tuple[int, int]:
    return consumer.get_watermark_offsets(tp, timeout=30)


def _or_end(consumer, tp) -> int:
    return tp.offset if tp.offset >= 0 else _bounds(consumer, tp)[1]


def _resumed(consumer, tp, fallback: OffsetReset) -> int:
    if tp.offset >= 0:
        return tp.offset
    if fallback is OffsetReset.FAIL:
        raise ConfigError(
            f"source.start.fallback: fail, and group has no committed offset for "
            f"{tp.topic}[{tp.partition}]"
        )
    low, high = _bounds(consumer, tp)
    return low if fallback is OffsetReset.EARLIEST else high


# ------------------------------------------------------------------ the read


@dataclass(frozen=True)
class KafkaRecord:
    """One record read, with where it came from (what parse and dead letters need)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class _ResumeOnlyTracker(OffsetRestrictionTracker):
    """Splits only to resume later (`defer_remainder`, fraction 0). A runner's split of an
    unbounded partition at a fraction would cut it at an offset half way to END, past any
    record, and start a second reader of the partition there."""

    def try_split(self, fraction_of_remainder):
        if fraction_of_remainder > 0:
            return None
        return super().try_split(fraction_of_remainder)


class _FromStartOffset(RestrictionProvider):
    """A partition's offsets from its start on, never split (one reader each)."""

    def initial_restriction(self, element):
        return OffsetRange(int(element.rsplit("|", 1)[1]), END)

    def create_tracker(self, restriction):
        return _ResumeOnlyTracker(restriction)

    def restriction_size(self, element, restriction):
        return 1  # the backlog is not known here; every partition weighs the same

    def split(self, element, restriction):
        yield restriction


class _ReadPartitionFn(beam.DoFn):
    """Element "topic|partition|start": reads the partition from its restriction's start,
    a slice per bundle, and commits each slice's end once the bundle succeeded."""

    def __init__(self, token: str, group_id: str, isolation: str, commit: bool):
        self.token = token
        self.group_id = group_id
        self.isolation = isolation
        self.commit = commit

    def setup(self):
        self.readers: dict[tuple[str, int], _PartitionReader] = {}
        self.config = {
            **_connection(self.token),
            "group.id": self.group_id,
            "enable.auto.commit": "false",
            "isolation.level": self.isolation,
        }
        self.read = Metrics.counter("read", "records")
        self.committer = _committer(self.config)

    @beam.DoFn.unbounded_per_element()
    def process(
        self,
        element: str,
        finalizer=beam.DoFn.BundleFinalizerParam,
        tracker=beam.DoFn.RestrictionParam(_FromStartOffset()),
    ):
        topic, at, _ = element.rsplit("|", 2)
        partition = int(at)
        start = tracker.current_restriction().start
        reader = self._reader(topic, partition, start)
        done = [start]  # the next offset once this bundle's records are written
        # Registered first: Prism finalizes every bundle of this stage, and the SDK refuses
        # to finalize one that registered nothing.
        finalizer.register(lambda: self._committed(topic, partition, done[0]))
        count, deadline = 0, time.monotonic() + READ_SLICE_S
        while time.monotonic() < deadline and count < READ_SLICE_RECORDS:
            for message in reader.poll():
                if not tracker.try_claim(message.offset()):
                    self.read.inc(count)
                    return  # the runner split the rest off
                done[0] = message.offset() + 1
                count += 1
                yield _record(message)
        self.read.inc(count)
        end = reader.position()
        if end > done[0] and tracker.try_claim(end - 1):  # offsets with no record (markers)
            done[0] = end
        tracker.defer_remainder(Duration.of(IDLE_RESUME_S) if done[0] == start else None)

    def _committed(self, topic: str, partition: int, offset: int) -> None:
        """A bundle's finalizer: it succeeded, its records are written."""
        if self.commit:
            self.committer.commit(topic, partition, offset)

    def _reader(self, topic: str, partition: int, start: int) -> _PartitionReader:
        reader = self.readers.get((topic, partition))
        if reader is None or reader.next_offset != start:
            if reader is not None:
                reader.close()
            reader = _PartitionReader(self.config, topic, partition, start)
            self.readers[(topic, partition)] = reader
        return reader

    def teardown(self):
        for reader in getattr(self, "readers", {}).values():
            reader.close()


def _record(message) -> KafkaRecord:
    return KafkaRecord(
        message.topic(),
        message.partition(),
        message.offset(),
        message.timestamp()[1],
        message.key(),
        message.value(),
    )


class _PartitionReader:
    """A consumer assigned one partition at `start`, never subscribed (no rebalances).
    Closing waits for a poll in progress: Beam's harness tears a DoFn down from another
    thread while its bundle may still be polling (a pipeline cancelled), and a consumer
    closed under a poll crashed the process."""

    def __init__(self, config: dict, topic: str, partition: int, start: int):
        from confluent_kafka import Consumer, TopicPartition

        self.tp = TopicPartition(topic, partition)
        self.consumer = Consumer(config)
        self.consumer.assign([TopicPartition(topic, partition, start)])
        self.next_offset = start
        self.closed = False
        self.lock = threading.Lock()

    def poll(self) -> list:
        """Records polled (none once closed); a retriable error is librdkafka's to retry,
        any other fails the bundle with the partition named."""
        records = []
        with self.lock:
            if self.closed:
                return []
            messages = self.consumer.consume(POLL_RECORDS, timeout=POLL_TIMEOUT_S)
        for message in messages:
            error = message.error()
            if error is None:
                records.append(message)
            elif not error.retriable():
                raise RuntimeError(f"reading {self.tp.topic}[{self.tp.partition}]: {error}")
        return records

    def position(self) -> int:
        """The next offset to read: past the records polled and any markers after them."""
        with self.lock:
            if not self.closed:
                [tp] = self.consumer.position([self.tp])
                self.next_offset = max(self.next_offset, tp.offset)
        return self.next_offset

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                self.consumer.close()


class _Committer:
    """The group's commits, from one consumer of this process (never assigned) whatever
    reader read the bundle, and only forward: finalizers of a partition's bundles can run
    in any order, and a replaced reader's last bundle is finalized after it closed."""

    def __init__(self, config: dict):
        from confluent_kafka import Consumer

        self.consumer = Consumer(config)
        self.committed: dict[tuple[str, int], int] = {}
        self.lock = threading.Lock()

    def commit(self, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        with self.lock:
            if offset <= self.committed.get((topic, partition), -1):
                return
            self.consumer.commit(
                offsets=[TopicPartition(topic, partition, offset)], asynchronous=False
            )
            self.committed[(topic, partition)] = offset


_COMMITTERS: dict[tuple, _Committer] = {}
_COMMITTERS_LOCK = threading.Lock()


def _committer(config: dict) -> _Committer:
    """The process's committer for this client config and group (one per pipeline)."""
    key = tuple(sorted(config.items()))
    with _COMMITTERS_LOCK:
        if key not in _COMMITTERS:
            _COMMITTERS[key] = _Committer(config)
        return _COMMITTERS[key]


class ReadPartitions(beam.PTransform):
    """Every partition of `source.topics` from its start offset (start_offsets), as
    KafkaRecords, in slices of at most READ_SLICE_S."""

    def __init__(self, settings: Settings, starts: dict[tuple[str, int], int]):
        super().__init__()
        self.token = connection_token(settings)
        self.group_id = cast(str, settings.source.group_id)  # consumer_config requires it
        self.isolation = settings.source.isolation_level.value
        self.commit = settings.beam.commit_offsets
        self.elements = [f"{t}|{p}|{offset}" for (t, p), offset in sorted(starts.items())]

    def expand(self, pbegin):
        return (
            pbegin
            | "Partitions" >> beam.Create(self.elements)
            | "ReadPartition"
            >> beam.ParDo(_ReadPartitionFn(self.token, self.group_id, self.isolation, self.commit))
        )


# ------------------------------------------------------------------ the write


class _WriteFn(beam.DoFn):
    """JSON text -> `topic`, keyed by the key the record carries
    (pipelines.records.lines.META) or its `key_field`; every record of a bundle delivered
    (acks=all, idempotent) before the bundle ends, or the bundle fails."""

    def __init__(self, token: str, topic: str, counter: str, key_field: str | None):
        self.token = token
        self.topic = topic
        self.counter_name = counter
        self.key_field = key_field

    def setup(self):
        from confluent_kafka import Producer

        self.failed: list[str] = []
        self.producer = Producer(
            {
                **_connection(self.token),
                "acks": "all",
                "enable.idempotence": "true",
                "linger.ms": "5",
            }
        )
        self.written = Metrics.counter("write", self.counter_name)

    def process(self, text: str):
        meta, text = split_meta(text)
        key: bytes | None = key_of(meta)
        if self.key_field:
            value = jsontext.loads(text).get(self.key_field)
            key = (value if isinstance(value, str) else jsontext.dumps(value)).encode()
        self._produce(key, text.encode("utf-8"))
        self.written.inc()

    def _produce(self, key: bytes | None, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value, key, on_delivery=self._delivered)
                return
            except BufferError:  # its queue is full: let deliveries drain it
                self.producer.poll(0.1)

    def _delivered(self, error, _message) -> None:
        if error is not None:
            self.failed.append(str(error))

    def finish_bundle(self):
        left = self.producer.flush(FLUSH_TIMEOUT_S)
        if left or self.failed:
            why = (
                self.failed[0]
                if self.failed
                else f"{left} not delivered in {FLUSH_TIMEOUT_S:.0f} s"
            )
            self.failed = []
            raise RuntimeError(f"writing to {self.topic}: {why}")

    def teardown(self):
        producer = getattr(self, "producer", None)
        if producer is not None:
            producer.flush(FLUSH_TIMEOUT_S)


class WriteTexts(beam.PTransform):
    """JSON text -> a Kafka topic, flushed with each bundle."""

    def __init__(self, settings: Settings, topic: str, counter: str, key_field: str | None):
        super().__init__()
        self.token = connection_token(settings)
        self.topic = topic
        self.counter = counter
        self.key_field = key_field

    def expand(self, texts):
        return texts | beam.ParDo(_WriteFn(self.token, self.topic, self.counter, self.key_field))
