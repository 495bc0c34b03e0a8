"""The enrichment policy (timeouts, retries, mark-missing, fail) against the real HTTP
service, served in-process on a free port."""

from __future__ import annotations

import asyncio

import pytest

from pipelines.devtools.enrichment_service import Behaviour, company_profile, make_app
from pipelines.enrichment import EnrichmentFailed, HttpEnrichmentClient, enrich_record, worst_case_ms
from pipelines.settings import EnrichmentSettings, OnFailure

pytestmark = pytest.mark.unit


async def _with_service(behaviour: Behaviour, cfg_kwargs: dict, record: dict):
    from aiohttp.test_utils import TestServer

    server = TestServer(make_app(behaviour), host="127.0.0.1")
    await server.start_server()
    cfg = EnrichmentSettings(url=f"http://127.0.0.1:{server.port}", **cfg_kwargs)
    client = HttpEnrichmentClient(cfg.url, cfg.timeout, cfg.capacity)
    try:
        return await enrich_record(client, record, cfg), behaviour
    finally:
        await client.close()
        await server.close()


def run(behaviour, cfg, record):
    return asyncio.run(_with_service(behaviour, cfg, record))


def test_success_adds_the_profile():
    out, behaviour = run(Behaviour(latency_ms=5), {}, {"id": 1, "company": "acme"})
    assert out == {"id": 1, "company": "acme", "enrichment": company_profile("acme")}
    assert behaviour.requests == 1


def test_timeouts_are_retried_then_marked_missing():
    out, behaviour = run(Behaviour(latency_ms=300),
                         {"timeout": 50, "retries": 2, "backoff": 10}, {"id": 2, "company": "x"})
    assert out["enrichment"] is None
    assert out["enrichment_error"] == "timeout after 50 ms (3 attempts)"
    assert behaviour.requests == 3


def test_errors_are_retried_then_fail_under_fail_policy():
    with pytest.raises(EnrichmentFailed) as err:
        run(Behaviour(latency_ms=1, down=True),
            {"retries": 1, "backoff": 5, "on_failure": OnFailure.FAIL}, {"id": 3, "company": "x"})
    message = str(err.value)
    assert message.startswith("enrichment of record 3 failed: HTTP 503 from http://127.0.0.1:")
    assert message.endswith("/lookup (2 attempts)")


def test_worst_case_counts_every_attempt_and_backoff():
    cfg = EnrichmentSettings(timeout=1000, retries=2, backoff=100)
    assert worst_case_ms(cfg) == 3 * 1000 + 100 + 200
