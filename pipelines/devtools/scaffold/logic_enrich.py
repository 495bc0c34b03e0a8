"""Fast tests of the TEMPLATE_JOB job's logic with pipelines.testing: records from a list,
the real stages and lookup client on a local Flink environment, no Kafka; seconds each.
Add one for each rule you give the job; tests/integration/test_job_TEMPLATE_JOB.py runs it
against Kafka."""

from __future__ import annotations

import pytest

from pipelines import testing
from pipelines.devtools.enrichment_service import company_profile

pytestmark = pytest.mark.unit

JOB = "TEMPLATE_JOB"


def test_records_are_enriched_and_bad_ones_dead_lettered(enrichment_service):
    # The demo lookup service (tests/conftest.py); point enrichment.url at your own
    # service's test double when the job calls another.
    out = testing.run(
        JOB,
        [{"id": 1, "company": "Acme"}, b"{not json", {"id": 3}],
        overrides=[f"enrichment.url={enrichment_service.url}"],
    )
    assert [(r["id"], r["enrichment"]) for r in out.records] == [(1, company_profile("Acme"))]
    assert sorted(d["origin"]["offset"] for d in out.dead_letters) == [1, 2]
