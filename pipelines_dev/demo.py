"""Demo data: the job's topics and a stream of numbered JSON records, a few of them bad."""

from __future__ import annotations

import json
import logging
import time

from pipelines.settings import Settings
from pipelines.settings.client_properties import librdkafka_config
from pipelines_dev.topics import create_topics, produce

log = logging.getLogger(__name__)

COMPANIES = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"]


def demo_record(i: int, ts_ms: int) -> dict:
    return {
        "id": i,
        "company": COMPANIES[i % len(COMPANIES)],
        "amount": (i * 37) % 1000,
        "key": COMPANIES[i % len(COMPANIES)],
        "ts": ts_ms,
    }


def demo_values(count: int, bad_every: int = 0, start_ms: int | None = None) -> list[bytes]:
    """`count` records; every `bad_every`-th is malformed (alternately not JSON, no id)."""
    start_ms = int(time.time() * 1000) if start_ms is None else start_ms
    values = []
    for i in range(count):
        if bad_every and i % bad_every == bad_every - 1:
            values.append(
                b"{not json"
                if (i // bad_every) % 2 == 0
                else json.dumps({"company": "no-id"}).encode()
            )
        else:
            values.append(json.dumps(demo_record(i, start_ms + i * 10)).encode())
    return values


def job_topics(settings: Settings, partitions: int) -> dict[str, int]:
    topics = {t: partitions for t in settings.source.topics}
    topics[settings.sink.topic] = partitions
    for extra in (settings.sink.dead_letter_topic, settings.window.late_topic):
        if extra:
            topics[extra] = 1
    return topics


def prepare_demo(settings: Settings, records: int, bad_every: int, partitions: int) -> None:
    broker = librdkafka_config(settings.kafka)  # TLS and SASL as the job connects
    topics = job_topics(settings, partitions)
    create_topics(broker, topics)
    log.info(f"demo     topics ready: {', '.join(f'{t} ({n}p)' for t, n in topics.items())}")
    if not settings.source.topics:
        return
    sent = produce(broker, settings.source.topics[0], demo_values(records, bad_every))
    log.info(
        f"demo     produced {sent} records to {settings.source.topics[0]} "
        f"({sent // bad_every if bad_every else 0} malformed)"
    )
