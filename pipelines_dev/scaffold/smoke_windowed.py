"""Smoke test of the TEMPLATE_JOB job: exact counts per key and window.
A bounded source ends with a final watermark, so every window closes. Extend it as the
job becomes yours (tests/integration/test_windowed_idleness.py shows idle partitions)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import run_cli, topic_args

pytestmark = pytest.mark.integration

BASE = 1_700_000_000_000


def test_TEMPLATE_JOB_counts_every_window(kafka, names):
    records: list[dict[str, Any]] = [
        {"id": i, "key": "k" + str(i % 3), "ts": BASE + i * 250} for i in range(200)
    ]
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1, names("late"): 1})
    produce(kafka, names("in"), [json.dumps(r) for r in records])
    run_cli(
        "run",
        "TEMPLATE_JOB",
        *topic_args(kafka, names, dead_letters=True, late=True),
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        "watermarks.max_out_of_orderness=60s",
    )
    expected = Counter((r["key"], BASE + (r["ts"] - BASE) // 10_000 * 10_000) for r in records)
    out = [json.loads(v) for v in read_all(kafka, names("out"))]
    # Every window exactly once: a window emitted twice fails.
    assert sorted((r["key"], r["window_start"], r["count"]) for r in out) == sorted(
        (key, start, n) for (key, start), n in expected.items()
    )
