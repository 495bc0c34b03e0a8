"""Kafka -> parse -> slow async enrichment -> Kafka, exactly once; bad records to dead letters.

A slow external lookup per record, done right: the lookup is async, so checkpoints (and
the offset commits that ride on them) keep completing while thousands of lookups are in
flight.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.api import EnrichmentClient, Job, Settings, stages
from pipelines.lookups.http_demo import DemoHttpClient, DemoService

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment


def lookup_client(settings: Settings) -> EnrichmentClient:
    """Where your lookup plugs in: return any EnrichmentClient (pipelines.api, docs/api.md
    has the contract: `lookup`, optionally `lookup_batch`, which errors to raise). The
    stage owns batching, timeouts, retries and the failure policy. Runs on each worker;
    preflight calls its `check` before the job starts."""
    return DemoHttpClient.from_settings(settings)


def build(env: StreamExecutionEnvironment, settings: Settings) -> None:
    stages.require(
        settings,
        "sink.dead_letter_topic",
        "malformed records must go somewhere, never silently dropped",
    )
    raw = stages.kafka_source(env, settings)
    # One Python stage parses and looks up each batch (stages.parse_and_enrich); a job that
    # does more between the two composes stages.parse_for_enrichment and stages.enrich
    # (with enrichment.operator: batched: the flowing stage runs with its parse only).
    enriched, dead_letters = stages.parse_and_enrich(raw, settings, lookup_client)
    stages.kafka_sink(enriched, settings)
    stages.dead_letter_sink(settings, dead_letters)


job = Job(build, sections=(DemoService,))

if __name__ == "__main__":
    job.main()
