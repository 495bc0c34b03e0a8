"""Fast tests of the TEMPLATE_JOB job's contract with pipelines.testing: records from a list,
the real stages on a local Flink environment, no Kafka and no service; seconds each.

They hold whatever client the job's `lookup_client` returns: the client is replaced by the
test double below (the one place to change), and the tests check what the job promises
around its answers. Add one for each rule you give the job;
tests/integration/test_job_TEMPLATE_JOB.py runs the job with its real client on Kafka."""

from __future__ import annotations

import pytest

from pipelines import testing
from pipelines.api import PermanentLookupError

pytestmark = pytest.mark.unit

JOB = "TEMPLATE_JOB"

# --- the one place for your client's test double ----------------------------------------
# RECORDS are valid input for the job (its parse.required_fields); ANSWERS what the client
# answers for each, by id; a record without an answer is one the client refuses.
RECORDS = [{"id": 1, "company": "Acme"}, {"id": 2, "company": "Globex"}]
ANSWERS = {1: {"tier": "gold"}}


class Double:
    """The client's stand-in: ANSWERS, or a refusal as your client would refuse."""

    async def lookup(self, record: dict) -> dict:
        if record.get("id") not in ANSWERS:
            raise PermanentLookupError(f"no answer for record {record.get('id')!r}")
        return ANSWERS[record["id"]]

    async def close(self) -> None:
        pass


def double(settings) -> Double:
    return Double()


# -----------------------------------------------------------------------------------------

FIX = "change RECORDS and ANSWERS at the marked place of this file to the job's records"


def test_each_record_carries_its_answer_and_a_refused_one_is_a_dead_letter():
    out = testing.run(JOB, RECORDS, lookup_client=double)
    parse_errors = [d["error"] for d in out.dead_letters if d["stage"] == "parse"]
    assert not parse_errors, f"the job refused RECORDS as input ({parse_errors[0]}): {FIX}"
    assert {r["id"]: r["enrichment"] for r in out.records} == ANSWERS, FIX
    refused = sorted(d["origin"]["offset"] for d in out.dead_letters if d["stage"] == "enrich")
    assert refused == [i for i, r in enumerate(RECORDS) if r["id"] not in ANSWERS], FIX


def test_malformed_input_is_a_dead_letter_with_its_origin_and_the_rest_goes_on():
    out = testing.run(JOB, [b"{not json", *RECORDS, b"\xff\xfe"], lookup_client=double)
    parse = [d for d in out.dead_letters if d["stage"] == "parse"]
    assert sorted(d["origin"]["offset"] for d in parse) == [0, len(RECORDS) + 1]
    assert {r["id"] for r in out.records} == set(ANSWERS), FIX
