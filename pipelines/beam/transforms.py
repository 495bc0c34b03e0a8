"""The enrich job's stages as Beam composite transforms, each with a stable label:
read (Python's in streaming, KafkaIO's when bounded), parse (dead letters as a tagged output), enrich (the
project's enrichment stage and lookup clients, a batch of lookups in flight at once),
write (as the read). The logic is the PyFlink job's own (pipelines.records.parse,
pipelines.lookups.enrichment): the same record gives the same output and the same dead letter.
"""

from __future__ import annotations

import asyncio
from typing import cast

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.beam.kafka_io import ReadPartitions, WriteTexts, start_offsets
from pipelines.lookups import ClientFactory
from pipelines.lookups.enrichment import EnrichStats, enricher_for
from pipelines.records import jsontext
from pipelines.records.lines import DEAD_MARK, key_of, split_meta, with_meta
from pipelines.records.parse import dead_letter, origin_block, parse_value
from pipelines.settings import ConfigError, OffsetReset, Settings, StartMode
from pipelines.settings.client_properties import java_client_properties
from pipelines.settings.secrets import without_secrets

__all__ = [
    "ConfigUnsupported",
    "EnrichRecords",
    "ParseRecords",
    "ReadRecords",
    "WriteRecords",
    "consumer_config",
]

DEAD = "dead_letters"


class ConfigUnsupported(ConfigError):
    """A setting the Beam pipeline cannot honour (the message names it)."""


def consumer_config(settings: Settings) -> dict[str, str]:
    if not settings.source.group_id:
        raise ConfigUnsupported(
            "source.group_id: the Beam pipeline needs one (KafkaIO commits the offsets it "
            "finalized to it, and a rerun resumes from them); e.g. --set source.group_id=NAME"
        )
    start = settings.source.start
    if start.mode is StartMode.GROUP_OFFSETS:
        reset = {
            OffsetReset.EARLIEST: "earliest",
            OffsetReset.LATEST: "latest",
            OffsetReset.FAIL: "none",
        }[start.fallback]
    elif start.mode in (StartMode.EARLIEST, StartMode.TIMESTAMP):
        reset = "earliest"
    else:
        raise ConfigUnsupported(
            f"source.start.mode: {start.mode.value} is not supported by the Beam pipeline; "
            f"allowed there: group-offsets, earliest, timestamp"
        )
    return {
        **java_client_properties(settings.kafka, shaded=False),
        "bootstrap.servers": settings.kafka.bootstrap_servers,
        "group.id": settings.source.group_id,
        "auto.offset.reset": reset,
        "enable.auto.commit": "false",
    }


class ReadRecords(beam.PTransform):
    """Kafka records with their topic, partition, offset, timestamp, key and value bytes:
    streaming, Python's read (pipelines.beam.kafka_io); bounded, KafkaIO's (the
    expansion service's address given)."""

    def __init__(self, settings: Settings, expansion_service: str | None):
        super().__init__()
        self.settings = settings
        self.expansion_service = expansion_service

    def expand(self, pbegin):
        from apache_beam.io.kafka import ReadFromKafka

        s, cfg = self.settings, self.settings.beam
        if not s.source.topics:
            raise ConfigUnsupported(
                "source.topic_pattern: the Beam pipeline reads named topics only"
            )
        config = consumer_config(s)  # what it refuses, it refuses for both reads
        if self.expansion_service is None:
            return pbegin | ReadPartitions(s, start_offsets(s))
        kwargs = {}
        if s.source.start.mode is StartMode.TIMESTAMP:
            kwargs["start_read_time"] = s.source.start.timestamp
        if not cfg.streaming:
            if cfg.max_records is not None:
                kwargs["max_num_records"] = cfg.max_records
            if cfg.max_read_time is not None:
                kwargs["max_read_time"] = max(1, cfg.max_read_time // 1000)
            kwargs["commit_offset_in_finalize"] = cfg.commit_offsets
        return pbegin | ReadFromKafka(
            consumer_config=config,
            topics=list(s.source.topics),
            with_metadata=True,
            expansion_service=self.expansion_service,
            **kwargs,
        )


class _ParseFn(beam.DoFn):
    def __init__(self, settings: Settings):
        self.settings = settings

    def setup(self):
        self.dead = Metrics.counter("parse", "deadLetters")

    def process(self, row):
        s = self.settings
        record, reason = parse_value(row.value, s.parse.required_fields, None, s.parse.origin_field)
        if record is None:
            self.dead.inc()
            yield beam.pvalue.TaggedOutput(
                DEAD,
                dead_letter(row, cast(str, reason), s.job.name, s.sink.dead_letter_bytes(s.kafka)),
            )
            return
        if s.parse.origin_field:
            record[s.parse.origin_field] = origin_block(
                row.topic, row.partition, row.offset, row.timestamp
            )
        yield row.key, record


class ParseRecords(beam.PTransform):
    """Kafka records -> (Kafka key, JSON record dict); the rest to the `dead_letters`
    output."""

    def __init__(self, settings: Settings):
        super().__init__()
        self.settings = settings

    def expand(self, rows):
        fn = _ParseFn(without_secrets(self.settings))  # pickled into the pipeline
        return rows | beam.ParDo(fn).with_outputs(DEAD, main="records")


class _EnrichBatchFn(beam.DoFn):
    """Records buffered per bundle up to `enrichment.capacity` and looked up together, in
    batches of `enrichment.batch_size` all in flight at once (each record with its own
    timeout and retries), through the project's enrichment stage and the job's lookup
    client. A bundle's last partial buffer goes at its end, so nothing waits for more input."""

    def __init__(self, settings: Settings, client_factory: ClientFactory):
        self.settings = settings
        self.client_factory = client_factory
        self.batch_size = settings.enrichment.effective_batch_size()
        self.in_flight = settings.enrichment.capacity

    def setup(self):
        self.loop = asyncio.new_event_loop()
        self.enricher = enricher_for(self.settings, self.client_factory)
        self.reported = dict.fromkeys(EnrichStats.NAMES, 0)
        self.counters = {n: Metrics.counter("enrich", n) for n in EnrichStats.NAMES}

    def start_bundle(self):
        self.buffer = []

    def process(self, record, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
        self.buffer.append((record, timestamp, window))
        if len(self.buffer) >= self.in_flight:
            yield from self._flush()

    def finish_bundle(self):
        yield from self._flush()

    async def _all_of(self, records):
        size = self.batch_size
        batches = [records[i : i + size] for i in range(0, len(records), size)]
        done = await asyncio.gather(*map(self.enricher.many, batches))
        return [text for batch in done for text in batch]

    def _flush(self):
        from apache_beam.utils.windowed_value import WindowedValue

        batch, self.buffer = self.buffer, []
        if not batch:
            return
        texts = self.loop.run_until_complete(self._all_of([r for (_, r), _, _ in batch]))
        for text, ((key, _), timestamp, window) in zip(texts, batch):
            if text.startswith(DEAD_MARK):
                yield beam.pvalue.TaggedOutput(
                    DEAD, WindowedValue(text[len(DEAD_MARK) :], timestamp, (window,))
                )
            else:  # the input record's key travels with it, as in the PyFlink job
                yield WindowedValue(with_meta(key, None, None, text), timestamp, (window,))
        for name, count in self.enricher.stats.counts.items():
            if count != self.reported[name]:
                self.counters[name].inc(count - self.reported[name])
                self.reported[name] = count

    def teardown(self):
        loop = getattr(self, "loop", None)
        if loop is not None and not loop.is_closed():
            loop.run_until_complete(self.enricher.client.close())
            loop.close()


class EnrichRecords(beam.PTransform):
    """JSON records -> enriched JSON text; failed lookups to `dead_letters` (the
    enrichment failure policy of the `enrichment:` settings)."""

    def __init__(self, settings: Settings, client_factory: ClientFactory):
        super().__init__()
        self.settings = settings
        self.client_factory = client_factory

    def expand(self, records):
        return records | "Lookup" >> beam.ParDo(
            _EnrichBatchFn(without_secrets(self.settings), self.client_factory)
        ).with_outputs(DEAD, main="enriched")


class _ToKafkaRecord(beam.DoFn):
    """(key, value) bytes for KafkaIO: the key the record carries (pipelines.records.lines.META) or
    its `key_field`. Beam's Python WriteToKafka writes no headers or record timestamps, and
    its bytes coder takes no null key: a record without one gets the empty key."""

    def __init__(self, counter: str, key_field: str | None):
        self.counter_name = counter
        self.key_field = key_field

    def setup(self):
        self.written = Metrics.counter("write", self.counter_name)

    def process(self, text: str):
        self.written.inc()
        meta, text = split_meta(text)
        if self.key_field:
            value = jsontext.loads(text).get(self.key_field)
            key = (value if isinstance(value, str) else jsontext.dumps(value)).encode()
        else:
            key = key_of(meta) or b""
        yield key, text.encode("utf-8")


class WriteRecords(beam.PTransform):
    """JSON text -> a Kafka topic, at least once: streaming, Python's write flushed with
    each bundle (pipelines.beam.kafka_io); bounded, KafkaIO's (Beam's Python KafkaIO write
    has no exactly-once mode on these runners)."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        expansion_service: str | None,
        counter: str = "records",
        key_field: str | None = None,
    ):
        super().__init__()
        self.settings = settings
        self.topic = topic
        self.key_field = key_field
        self.expansion_service = expansion_service
        self.counter = counter

    def expand(self, texts):
        from apache_beam.io.kafka import WriteToKafka

        if self.expansion_service is None:
            return texts | WriteTexts(self.settings, self.topic, self.counter, self.key_field)
        producer = {
            **java_client_properties(self.settings.kafka, shaded=False),
            "bootstrap.servers": self.settings.kafka.bootstrap_servers,
        }
        return (
            texts
            | "ToKafkaRecord"
            >> beam.ParDo(_ToKafkaRecord(self.counter, self.key_field)).with_output_types(
                tuple[bytes, bytes]
            )
            | WriteToKafka(
                producer_config=producer, topic=self.topic, expansion_service=self.expansion_service
            )
        )
