"""Fast tests of the TEMPLATE_JOB job's logic with pipelines.testing: records from a list,
the real stages on a local Flink environment, no Kafka; seconds each. Add one for each rule
you give the job; tests/integration/test_job_TEMPLATE_JOB.py runs it against Kafka."""

from __future__ import annotations

import pytest

from pipelines import testing

pytestmark = pytest.mark.unit

JOB = "TEMPLATE_JOB"


def test_every_record_is_copied_as_it_is():
    values = [b'{"id": 1}', b"not JSON at all", b"", None]
    assert testing.run(JOB, values).records == values


def test_validating_keeps_the_good_records_and_dead_letters_the_rest():
    out = testing.run(
        JOB,
        [{"id": 1}, b"{not json", {"id": 2}],
        overrides=["parse.validate_records=true", "sink.dead_letter_topic=dead-letters"],
    )
    assert [r["id"] for r in out.records] == [1, 2]
    assert [d["origin"]["offset"] for d in out.dead_letters] == [1]
