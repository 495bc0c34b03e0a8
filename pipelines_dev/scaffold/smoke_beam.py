"""Smoke test of the TEMPLATE_JOB Beam job: a bounded run on the
DirectRunner writes every good record once and every bad one as a dead letter. Extend it
as the job becomes yours (tests/integration/test_beam.py shows Prism streaming)."""

from __future__ import annotations

import json

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import run_cli, topic_args

pytestmark = pytest.mark.integration


def test_TEMPLATE_JOB_processes_every_record(kafka, names, enrichment_service):
    total, bad_every = 300, 50
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(total, bad_every=bad_every))
    run_cli(
        "beam",
        "run",
        "TEMPLATE_JOB",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        f"demo_service.url={enrichment_service.url}",
        "--set",
        "beam.runner=direct",
        "--set",
        "beam.streaming=false",
        "--set",
        f"beam.max_records={total}",
        timeout=400,
    )
    out = [json.loads(v) for v in read_all(kafka, names("out"))]
    dead = [json.loads(v) for v in read_all(kafka, names("dlq"))]
    assert {r["id"] for r in out} == {i for i in range(total) if i % bad_every != bad_every - 1}
    assert len(dead) == total // bad_every
