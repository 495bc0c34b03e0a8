"""Each job's logic through pipelines.testing: records from a list, the real stages on a
local Flink environment, the sinks' output as lists; no Kafka. What a team copies first
when it changes a job (Kafka's side, exactly once across restarts, is the integration
tests')."""

from __future__ import annotations

import os

import pytest

from pipelines import testing
from pipelines_dev.enrichment_service import company_profile

pytestmark = pytest.mark.unit


def test_windowed_counts_per_key_and_window_and_dead_letters_the_malformed(flink_env):
    out = testing.run(
        "windowed",
        [
            {"id": 1, "key": "a", "ts": 1_000},
            {"id": 2, "key": "a", "ts": 2_000},
            {"id": 3, "key": "b", "ts": 3_000},
            b"{not json",
            {"id": 4, "key": "a"},  # no event time
            {"id": 5, "key": "a", "ts": 25_000},
        ],
    )
    counts = sorted((r["key"], r["window_start"], r["count"]) for r in out.records)
    assert counts == [("a", 0, 2), ("a", 20_000, 1), ("b", 0, 1)]
    assert [(d["origin"]["offset"], d["stage"]) for d in out.dead_letters] == [
        (3, "parse"),
        (4, "parse"),
    ]
    assert out.dead_letters[1]["error"] == "missing required field(s): ts"


def test_passthrough_copies_bytes_as_they_are(flink_env):
    values = [b"hello", b"\xff\x00 not utf-8", None, b""]
    before = dict(os.environ)
    out = testing.run("passthrough", [testing.Record(v, key=b"k") for v in values])
    assert dict(os.environ) == before  # the in-process workers' environment did not stay
    assert [(w.sink, w.value, w.key) for w in out.written] == [
        ("kafka-sink", v, b"k") for v in values
    ]


def test_passthrough_validating_keeps_records_and_their_keys(flink_env):
    out = testing.run(
        "passthrough",
        [testing.Record({"id": 1}, key="one"), b"[1, 2]", testing.Record({"id": 2}, partition=1)],
        overrides=["parse.validate_records=true", "sink.dead_letter_topic=dlq"],
    )
    assert [(w.value["id"], w.key) for w in out.written if w.sink == "kafka-sink"] == [
        (1, b"one"),
        (2, None),
    ]
    assert [d["error"] for d in out.dead_letters] == ["not a JSON object: list"]


def test_enrich_adds_the_services_answer_and_dead_letters_what_it_cannot(
    flink_env, enrichment_service
):
    enrichment_service.configure(unknown=["Nowhere Ltd"])
    out = testing.run(
        "enrich",
        [
            {"id": 1, "company": "Acme"},
            {"id": 2, "company": "Nowhere Ltd"},
            {"id": 3},
            {"id": 4, "company": "Globex"},
        ],
        overrides=[f"demo_service.url={enrichment_service.url}", "sink.dead_letter_topic=dlq"],
    )
    enriched = sorted(out.records, key=lambda r: r["id"])
    assert [(r["id"], r["enrichment"]) for r in enriched] == [
        (1, company_profile("Acme")),
        (4, company_profile("Globex")),
    ]
    assert sorted((d["stage"], d["origin"]["offset"]) for d in out.dead_letters) == [
        ("enrich", 1),
        ("parse", 2),
    ]


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_enrich_flowing_emits_every_record_once_in_either_mode(flink_env, enrichment_service, mode):
    """The flowing stage (its own event loop, lookups in flight across batches of 7, drained
    at the end of input): every valid record out once, enriched, the bad ones dead-lettered
    by their step, in process and in thread mode."""
    enrichment_service.configure(latency_ms=20, unknown=["Nowhere Ltd"])
    companies = ["Acme", "Globex", "Nowhere Ltd", "Initech"]
    inputs: list = [{"id": i, "company": companies[i % 4]} for i in range(60)]
    inputs[10] = b"{not json"
    out = testing.run(
        "enrich",
        inputs,
        overrides=[
            f"demo_service.url={enrichment_service.url}",
            "sink.dead_letter_topic=dlq",
            "enrichment.operator=flowing",
            "enrichment.batch_size=7",
            "enrichment.capacity=21",
            f"python.execution_mode={mode}",
        ],
    )
    enriched = sorted((r["id"], r["enrichment"]) for r in out.records)
    assert enriched == [
        (i, company_profile(companies[i % 4])) for i in range(60) if i != 10 and i % 4 != 2
    ]
    assert sorted((d["stage"], d["origin"]["offset"]) for d in out.dead_letters) == sorted(
        [("parse", 10), *(("enrich", i) for i in range(60) if i % 4 == 2 and i != 10)]
    )
