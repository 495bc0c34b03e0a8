"""Unit tests of the TEMPLATE_JOB job's own lookup client, the one its `lookup_client`
returns: what it answers, and which error it raises for what (pipelines.lookups: a
PermanentLookupError for a record no retry can enrich, a TransientLookupError for what a
retry may fix), and whether its `check` names a service that does not answer. The job's
contract tests (test_job_TEMPLATE_JOB_logic.py) hand the stages a double; these test the
client itself.

As generated they test the demo client against the demo service, started in this process.
When the job's client is your own they skip, naming this file: write its tests here."""

from __future__ import annotations

import asyncio

import pytest

from pipelines import testing
from pipelines.api import PermanentLookupError, TransientLookupError
from pipelines.jobs.TEMPLATE_JOB import lookup_client
from pipelines.lookups.http_demo import DemoHttpClient
from pipelines_dev.enrichment_service import Behaviour, company_profile, make_app

pytestmark = pytest.mark.unit

JOB = "TEMPLATE_JOB"


def demo_only() -> None:
    """Skip, naming this file, when the job's client is not the demo's."""
    client = lookup_client(testing.settings_for(JOB))
    if not isinstance(client, DemoHttpClient):
        pytest.skip(
            f"tests of the demo client, and the job's is a {type(client).__name__}: write "
            f"its tests in tests/unit/test_job_{JOB}_client.py"
        )


def client_at(url: str):
    """The job's client, pointed at the demo service at `url`."""
    demo_only()
    return lookup_client(testing.settings_for(JOB, f"demo_service.url={url}"))


async def outcome(record: dict, behaviour: Behaviour):
    """What the client answers for `record` from a demo service behaving so, or the error
    it raises."""
    from aiohttp.test_utils import TestServer

    demo_only()
    server = TestServer(make_app(behaviour), host="127.0.0.1")
    await server.start_server()
    client = client_at(f"http://127.0.0.1:{server.port}")
    try:
        return await client.lookup(record)
    except Exception as exc:  # noqa: BLE001 - the error is the outcome under test
        return exc
    finally:
        await client.close()
        await server.close()


def test_a_known_record_gets_its_enrichment():
    answer = asyncio.run(outcome({"id": 1, "company": "Acme"}, Behaviour(latency_ms=0)))
    assert answer == company_profile("Acme")


def test_a_record_the_service_does_not_know_is_refused_for_good():
    unknown = Behaviour(latency_ms=0, unknown=["Ghost"])
    error = asyncio.run(outcome({"id": 1, "company": "Ghost"}, unknown))
    assert isinstance(error, PermanentLookupError)
    assert str(error).startswith("HTTP 404 from http://127.0.0.1:")


def test_a_service_that_is_down_is_a_failure_a_retry_may_fix():
    error = asyncio.run(outcome({"id": 1, "company": "Acme"}, Behaviour(latency_ms=0, down=True)))
    assert isinstance(error, TransientLookupError)


def test_check_names_a_service_that_does_not_answer():
    problem = client_at("http://127.0.0.1:1").check(timeout_s=2.0)
    assert problem is not None
    key, message = problem
    assert key == "demo_service.url"
    assert message.startswith("no enrichment service answered at http://127.0.0.1:1 ")
