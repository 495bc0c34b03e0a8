"""Kafka -> parse -> slow async enrichment -> Kafka, as a Beam pipeline; bad records and
failed lookups to the dead-letter topic. At least once (see pipelines/beam/__init__.py)."""

from __future__ import annotations

from typing import cast

from pipelines import stages
from pipelines.beam.transforms import EnrichRecords, ParseRecords, ReadRecords, WriteRecords
from pipelines.lookups import EnrichmentClient
from pipelines.lookups.http_demo import DemoHttpClient, DemoService
from pipelines.settings import Settings

USES = ("enrichment",)
SECTIONS = (DemoService,)  # its own settings sections, as the PyFlink job of its name has


def lookup_client(settings: Settings) -> EnrichmentClient:
    """Where your lookup plugs in: the same clients as the PyFlink jobs (pipelines.lookups)."""
    return DemoHttpClient.from_settings(settings)


def build(pipeline, settings: Settings, expansion_service: str | None) -> None:
    """The pipeline; `expansion_service` is KafkaIO's for a bounded run, None in streaming.
    Each output is written by its own write, fused with the read that fed it (no Flatten
    between them): a read's offsets are committed once its bundle's writes are flushed."""
    stages.require(
        settings,
        "sink.dead_letter_topic",
        "malformed records must go somewhere, never silently dropped",
    )
    dead_letters = cast(str, settings.sink.dead_letter_topic)  # required above
    rows = pipeline | "Read" >> ReadRecords(settings, expansion_service)
    parsed = rows | "Parse" >> ParseRecords(settings)
    enriched = parsed.records | "Enrich" >> EnrichRecords(settings, lookup_client)
    enriched.enriched | "Write" >> WriteRecords(
        settings, settings.sink.topic, expansion_service, key_field=settings.sink.key_field
    )
    for label, failed in (("Parse", parsed), ("Enrich", enriched)):
        failed.dead_letters | f"Write{label}DeadLetters" >> WriteRecords(
            settings, dead_letters, expansion_service, counter="deadLetters"
        )
