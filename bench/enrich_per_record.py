"""The enrich job with a lookup per record, the two ways the reports wrote it, for
`make bench-operators` to hold the project's operators against (bench/operators.py):

- `sync`: a blocking lookup per record in a MapFunction (the reports' way);
- `async`: PyFlink's AsyncDataStream over one record per element, with a timeout per
  record, as PyFlink documents it.

Both use the project's stages around them (Kafka source, parse, exactly-once sink, dead
letters) and its record enricher (retries, failure policy), so the operator is the only
difference. Comparison only: not part of pipelines. Config: bench/conf/base/enrich_per_record.yaml.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, ClassVar, Literal

from pipelines.api import Job, JobSection, Settings, stages
from pipelines.flink.streams import split_lines
from pipelines.lookups.enrichment import enricher_for, rewrap, worst_case_ms
from pipelines.lookups.http_demo import DemoHttpClient, DemoService
from pipelines.records import jsontext
from pipelines.records.lines import split_meta
from pipelines.settings.secrets import without_secrets

if TYPE_CHECKING:
    from pyflink.datastream import DataStream, StreamExecutionEnvironment


class PerRecord(JobSection):
    """`per_record:`: which of the two per-record operators the job runs."""

    section: ClassVar[str] = "per_record"
    operator: Literal["sync", "async"] = "async"


def build(env: StreamExecutionEnvironment, settings: Settings) -> None:
    raw = stages.kafka_source(env, settings)
    batches, bad = stages.parse(raw, settings)
    records = stages.records(batches)
    # Recorded in the job graph as pipelines.stages.enrich records its client: the source
    # polls as many records as an enrichment stage keeps in flight and preflight checks the
    # service. The Python bundle is this config's python.bundle_size, set per operator.
    records.graph.lookup_clients.append(DemoHttpClient.from_settings)
    looked_up = per_record_lookups(records.stream, settings)
    # Each output is the record, or its dead letter marked: split apart in the JVM.
    enriched = records.derive(
        split_lines(looked_up, keep_marked=False).name("enriched").uid("enriched")
    )
    failed = records.derive(
        split_lines(looked_up, keep_marked=True).name("dead-letters").uid("enrich-dead-letters")
    )
    stages.kafka_sink(enriched, settings)
    stages.dead_letter_sink(settings, bad, failed)


def per_record_lookups(stream: DataStream, settings: Settings) -> DataStream:
    """One lookup per element of `stream` (one JSON record each), by `per_record.operator`."""
    from pyflink.common import Time, Types
    from pyflink.datastream import AsyncDataStream

    settings = without_secrets(settings)  # what the pickled functions carry
    cfg = settings.enrichment
    if PerRecord.of(settings).operator == "sync":
        out = stream.map(make_sync_lookup(settings), output_type=Types.STRING())
    else:
        overall = Time.milliseconds(worst_case_ms(cfg) + 5_000)
        wait = AsyncDataStream.ordered_wait if cfg.ordered else AsyncDataStream.unordered_wait
        out = wait(stream, make_async_lookup(settings), overall, cfg.capacity, Types.STRING())
    return out.name("enrich").uid("enrich-per-record")


def make_sync_lookup(settings: Settings):
    """A blocking lookup per record, on an event loop of its own. Made here, so that its
    pickle names only pipelines' modules (the workers do not import bench)."""
    from pyflink.datastream.functions import MapFunction

    class SyncLookup(MapFunction):
        def open(self, runtime_context):
            self.loop = asyncio.new_event_loop()
            self.enricher = enricher_for(settings, DemoHttpClient.from_settings, coalesce=False)

        def map(self, value: str) -> str:
            meta, text = split_meta(value)
            out = self.loop.run_until_complete(self.enricher.one(jsontext.loads(text)))
            return rewrap(meta, out)

        def close(self):
            self.loop.run_until_complete(self.enricher.client.close())
            self.loop.close()

    return SyncLookup()


def make_async_lookup(settings: Settings):
    """PyFlink's AsyncFunction over one record per element, as PyFlink documents it: Flink's
    timeout per record, which sends the record to dead letters."""
    from pyflink.datastream.functions import AsyncFunction

    class AsyncLookup(AsyncFunction):
        def open(self, runtime_context):
            self.enricher = enricher_for(settings, DemoHttpClient.from_settings, coalesce=False)

        async def async_invoke(self, value: str):
            meta, text = split_meta(value)
            return [rewrap(meta, await self.enricher.one(jsontext.loads(text)))]

        def timeout(self, value: str):
            record = jsontext.loads(split_meta(value)[1])
            return [self.enricher.dead_letter(record, "enrichment overran its timeout")]

    return AsyncLookup()


job = Job(build, sections=(DemoService, PerRecord))

if __name__ == "__main__":
    job.main()
