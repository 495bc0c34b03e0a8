"""Coalesced lookups against the real service: one round trip per batch, each record its own
result, failures per record."""

from __future__ import annotations

import asyncio

import pytest

from pipelines.devtools.enrichment_service import Behaviour, company_profile, make_app
from pipelines.enrichment import enrich_record, make_client
from pipelines.settings import EnrichmentSettings

pytestmark = pytest.mark.unit


async def _batch(behaviour: Behaviour, records: list[dict], **cfg):
    from aiohttp.test_utils import TestServer

    server = TestServer(make_app(behaviour), host="127.0.0.1")
    await server.start_server()
    settings = EnrichmentSettings(url=f"http://127.0.0.1:{server.port}", coalesce=True, **cfg)
    client = make_client(settings)
    try:
        return await asyncio.gather(*(enrich_record(client, r, settings) for r in records))
    finally:
        await client.close()
        await server.close()


def test_one_round_trip_for_a_batch():
    behaviour = Behaviour(latency_ms=20)
    records = [{"id": i, "company": f"c{i % 7}"} for i in range(50)]
    out = asyncio.run(_batch(behaviour, records))
    assert [r["enrichment"] for r in out] == [company_profile(r["company"]) for r in records]
    assert behaviour.requests == 1


def test_outage_marks_every_record_of_the_round_trip_missing():
    behaviour = Behaviour(latency_ms=1, down=True)
    out = asyncio.run(_batch(behaviour, [{"id": i, "company": "x"} for i in range(5)],
                             retries=1, backoff=1))
    assert all(r["enrichment"] is None for r in out)
    assert {r["enrichment_error"].split(" from ")[0] for r in out} == {"HTTP 503"}
    assert behaviour.requests == 2  # the first attempt and the retry, each one round trip
