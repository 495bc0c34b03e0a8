"""The enrichment policy against the real HTTP service, served in-process on a free port:
timeouts and retries, each `on_failure` policy, permanent failures, unexpected exceptions
and the error budget, oversized output, the counts behind the metrics, coalescing."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from pipelines.lookups import TransientLookupError
from pipelines.lookups.enrichment import (
    DEAD_MARK,
    EnrichmentFailed,
    RecordEnricher,
    stage_client,
    worst_case_ms,
)
from pipelines.lookups.http_demo import DemoHttpClient
from pipelines.records.parse import UnexpectedErrors
from pipelines.settings import EnrichmentSettings, ErrorSettings, OnFailure
from pipelines_dev.enrichment_service import Behaviour, company_profile, make_app

pytestmark = pytest.mark.unit

ORIGIN = {"topic": "in", "partition": 1, "offset": 7, "timestamp": 0}
VIA = {"mode": "one"}


@pytest.fixture(autouse=True, params=["one", "many"])
def via(request):
    """Every policy holds both ways a batch is enriched: each record through `one`
    concurrently, and `many` (one lookup_batch call for the first attempts, `one` for the
    retries of those that failed)."""
    VIA["mode"] = request.param
    yield request.param
    VIA["mode"] = "one"


def _enricher(client, cfg, max_bytes=1_048_576, in_a_row=100) -> RecordEnricher:
    return RecordEnricher(
        client, cfg, "enrich", "_origin", ErrorSettings(max_unexpected_in_a_row=in_a_row), max_bytes
    )


async def _with_service(behaviour: Behaviour, cfg_kwargs: dict, records: list[dict], **kw):
    from aiohttp.test_utils import TestServer

    server = TestServer(make_app(behaviour), host="127.0.0.1")
    await server.start_server()
    cfg = EnrichmentSettings(**cfg_kwargs)
    url = f"http://127.0.0.1:{server.port}"
    enricher = _enricher(stage_client(DemoHttpClient(url, cfg.capacity), cfg), cfg, **kw)
    try:
        if VIA["mode"] == "many":
            texts = await enricher.many(records)
        else:
            texts = await asyncio.gather(*(enricher.one(r) for r in records))
        return [_decode(t) for t in texts], enricher.stats.counts
    finally:
        await enricher.client.close()
        await server.close()


def _decode(text: str) -> tuple[str, dict]:
    if text.startswith(DEAD_MARK):
        return "dead", json.loads(text[1:])
    return "out", json.loads(text)


def run(behaviour, cfg, *records, **kw):
    return asyncio.run(_with_service(behaviour, cfg, list(records), **kw))


def rec(i: int, company: str = "acme") -> dict:
    return {"id": i, "company": company, "_origin": {**ORIGIN, "offset": i}}


def test_success_adds_the_profile():
    [(kind, out)], counts = run(Behaviour(latency_ms=5), {}, rec(1))
    assert kind == "out"
    assert out == {**rec(1), "enrichment": company_profile("acme")}
    assert counts["lookups"] == 1 and counts["lookupFailures"] == 0


def test_timeouts_are_retried_then_marked_missing():
    behaviour = Behaviour(latency_ms=300)
    [(kind, out)], counts = run(
        behaviour,
        {"timeout": 50, "retries": 2, "backoff": 10, "on_failure": OnFailure.MARK_MISSING},
        rec(2, "x"),
    )
    assert kind == "out" and out["enrichment"] is None
    assert out["enrichment_error"] == "timeout after 50 ms (3 attempts)"
    assert behaviour.requests == 3
    assert counts == {
        "lookups": 3,
        "lookupFailures": 3,
        "retries": 2,
        "markedMissing": 1,
        "deadLetters": 0,
        "unexpectedErrors": 0,
    }


def test_default_policy_dead_letters_after_retries_with_reason_and_origin():
    assert EnrichmentSettings().on_failure is OnFailure.DEAD_LETTER
    [(kind, dead)], counts = run(
        Behaviour(latency_ms=1, down=True), {"retries": 1, "backoff": 5}, rec(3, "x")
    )
    assert kind == "dead"
    assert dead["stage"] == "enrich" and dead["job"] == "enrich"
    assert dead["origin"] == {**ORIGIN, "offset": 3}
    assert dead["error"].startswith("enrichment unavailable: HTTP 503 from http://127.0.0.1:")
    assert dead["error"].endswith("/lookup (2 attempts)")
    assert json.loads(__import__("base64").b64decode(dead["value_b64"])) == {
        "id": 3,
        "company": "x",
    }
    assert counts["deadLetters"] == 1 and counts["retries"] == 1


def test_errors_are_retried_then_fail_under_fail_policy():
    with pytest.raises(EnrichmentFailed) as err:
        run(
            Behaviour(latency_ms=1, down=True),
            {"retries": 1, "backoff": 5, "on_failure": OnFailure.FAIL, "coalesce": False},
            rec(3, "x"),
        )
    message = str(err.value)
    assert message.startswith("enrichment of record 3 failed: HTTP 503 from http://127.0.0.1:")
    assert message.endswith("/lookup (2 attempts)")


@pytest.mark.parametrize("coalesce", [True, False])
def test_permanent_failure_is_not_retried_and_dead_letters_even_under_fail(coalesce):
    behaviour = Behaviour(latency_ms=1, unknown=["ghost"])
    results, counts = run(
        behaviour,
        {"retries": 3, "on_failure": OnFailure.FAIL, "coalesce": coalesce},
        rec(4, "ghost"),
        rec(5),
    )
    assert [kind for kind, _ in results] == ["dead", "out"]
    assert results[0][1]["error"].startswith("enrichment refused the record: HTTP 404 from ")
    assert counts["lookups"] == 2 and counts["retries"] == 0


class _Exploding:
    """A client with a bug for some records."""

    def __init__(self, bad: set[int]):
        self.bad = bad

    async def lookup(self, record):
        if record["id"] in self.bad:
            return {}["missing"]
        return {"ok": True}

    async def close(self):
        pass


def test_an_unexpected_exception_dead_letters_that_record_only():
    enricher = _enricher(_Exploding({2}), EnrichmentSettings(), in_a_row=3)
    out = [_decode(asyncio.run(enricher.one(rec(i)))) for i in range(4)]
    assert [kind for kind, _ in out] == ["out", "out", "dead", "out"]
    assert out[2][1]["error"] == "unexpected error in enrich: KeyError: 'missing'"
    assert enricher.stats.counts["unexpectedErrors"] == 1


def test_a_bug_that_fails_every_record_fails_the_job():
    enricher = _enricher(_Exploding(set(range(100))), EnrichmentSettings(), in_a_row=3)
    for i in range(2):
        asyncio.run(enricher.one(rec(i)))
    with pytest.raises(UnexpectedErrors, match="3 records in a row failed in enrich"):
        asyncio.run(enricher.one(rec(2)))


def test_output_too_large_for_the_sink_dead_letters_within_the_limit():
    class Huge:
        async def lookup(self, record):
            return {"blob": "x" * 200_000}

    enricher = _enricher(Huge(), EnrichmentSettings(), max_bytes=100_000)
    kind, dead = _decode(asyncio.run(enricher.one(rec(1))))
    assert kind == "dead"
    assert dead["error"].startswith("the enriched record (")
    assert dead["error"].endswith("is over what the sink may write (100000 bytes)")


def test_coalesced_lookups_share_one_round_trip():
    behaviour = Behaviour(latency_ms=20)
    records = [rec(i, f"c{i % 7}") for i in range(50)]
    results, _ = run(behaviour, {"coalesce": True}, *records)
    assert [out["enrichment"] for _, out in results] == [
        company_profile(r["company"]) for r in records
    ]
    assert behaviour.requests == 1


def test_outage_marks_every_record_of_the_round_trip_missing():
    behaviour = Behaviour(latency_ms=1, down=True)
    results, _ = run(
        behaviour,
        {"coalesce": True, "retries": 1, "backoff": 1, "on_failure": OnFailure.MARK_MISSING},
        *[rec(i, "x") for i in range(5)],
    )
    assert all(out["enrichment"] is None for _, out in results)
    assert {out["enrichment_error"].split(" from ")[0] for _, out in results} == {"HTTP 503"}
    assert behaviour.requests == 2  # the first attempt and the retry, each one round trip


def test_worst_case_counts_every_attempt_and_backoff():
    cfg = EnrichmentSettings(timeout=1000, retries=2, backoff=100)
    assert worst_case_ms(cfg) == 3 * 1000 + 100 + 200


class _BusyOnce:
    """Answers batches; record 3 is refused as busy the first time it is asked."""

    def __init__(self):
        self.calls: list[list[int]] = []

    async def lookup(self, record):
        raise AssertionError("the stage asks batches of a client that answers them")

    async def lookup_batch(self, records):
        self.calls.append([r["id"] for r in records])
        first = len(self.calls) == 1
        return [
            TransientLookupError("busy") if r["id"] == 3 and first else {"n": r["id"]}
            for r in records
        ]

    async def close(self):
        pass


def test_many_asks_once_for_the_batch_and_retries_only_what_failed(via):
    client = _BusyOnce()
    cfg = EnrichmentSettings(coalesce=True, retries=2, backoff=1)
    enricher = _enricher(stage_client(client, cfg), cfg)
    texts = asyncio.run(enricher.many([rec(i) for i in range(6)]))
    assert [_decode(t) for t in texts] == [
        ("out", {**rec(i), "enrichment": {"n": i}}) for i in range(6)
    ]
    assert client.calls == [[0, 1, 2, 3, 4, 5], [3]]
    counts = enricher.stats.counts
    assert (counts["lookups"], counts["lookupFailures"], counts["retries"]) == (7, 1, 1)


def test_an_answer_that_is_not_json_is_a_transient_failure_naming_the_url():
    """A proxy's HTML page with status 200, say: retried, then the policy decides."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    requests = []

    async def html(request):
        requests.append(request.path)
        return web.Response(text="<html>maintenance</html>", content_type="text/html")

    async def scenario():
        app = web.Application()
        app.router.add_get("/lookup", html)
        app.router.add_post("/lookup/batch", html)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        cfg = EnrichmentSettings(
            coalesce=True,
            retries=1,
            backoff=1,
            on_failure=OnFailure.MARK_MISSING,
        )
        url = f"http://127.0.0.1:{server.port}"
        enricher = _enricher(stage_client(DemoHttpClient(url, cfg.capacity), cfg), cfg)
        try:
            if VIA["mode"] == "many":
                return await enricher.many([rec(1, "x")])
            return [await enricher.one(rec(1, "x"))]
        finally:
            await enricher.client.close()
            await server.close()

    [(kind, out)] = [_decode(t) for t in asyncio.run(scenario())]
    assert kind == "out" and out["enrichment"] is None
    assert re.match(
        r"not JSON from http://127\.0\.0\.1:\d+/lookup(/batch)?: ", out["enrichment_error"]
    )
    assert len(requests) == 2  # the first attempt and the retry
