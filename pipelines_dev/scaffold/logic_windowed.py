"""Fast tests of the TEMPLATE_JOB job's logic with pipelines.testing: records from a list,
the real stages on a local Flink environment, no Kafka; seconds each. The input ends, so
event time reaches its end and every window fires. Add one for each rule you give the job;
tests/integration/test_job_TEMPLATE_JOB.py runs it against Kafka."""

from __future__ import annotations

import pytest

from pipelines import testing

pytestmark = pytest.mark.unit

JOB = "TEMPLATE_JOB"


def test_counts_per_key_and_window():
    out = testing.run(
        JOB,
        [
            {"id": 1, "key": "a", "ts": 1_000},
            {"id": 2, "key": "a", "ts": 2_000},
            {"id": 3, "key": "b", "ts": 3_000},
            {"id": 4, "key": "a", "ts": 25_000},
        ],
    )
    counts = sorted((r["key"], r["window_start"], r["count"]) for r in out.records)
    assert counts == [("a", 0, 2), ("a", 20_000, 1), ("b", 0, 1)]


def test_a_record_without_event_time_is_a_dead_letter():
    out = testing.run(JOB, [{"id": 1, "key": "a"}])
    assert out.records == []
    assert [d["error"] for d in out.dead_letters] == ["missing required field(s): ts"]
