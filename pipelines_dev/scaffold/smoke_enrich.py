"""Smoke test of the TEMPLATE_JOB job on Kafka with its real lookup client: every input
record comes out exactly once, as an enriched record or as a dead letter, and the malformed
ones as parse dead letters. Extend it as the job becomes yours."""

from __future__ import annotations

import base64
import json

import pytest

from pipelines import testing
from pipelines.jobs.TEMPLATE_JOB import lookup_client
from pipelines.lookups.http_demo import DemoHttpClient
from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import run_cli, topic_args

pytestmark = pytest.mark.integration

JOB = "TEMPLATE_JOB"


# --- the one place for the service your client calls in this test -----------------------
@pytest.fixture
def service(request) -> list[str]:
    """The `--set` lines that point the job's client at a running test instance of its
    service. As generated: the demo HTTP service, for the demo's client."""
    client = lookup_client(testing.settings_for(JOB))
    if not isinstance(client, DemoHttpClient):
        pytest.skip(
            f"needs a test instance of the service a {type(client).__name__} calls: "
            f"`service` in tests/integration/test_job_{JOB}.py starts it and returns the "
            f"--set lines it needs"
        )
    return [f"demo_service.url={request.getfixturevalue('enrichment_service').url}"]


# -----------------------------------------------------------------------------------------


def test_TEMPLATE_JOB_processes_every_record_once(kafka, names, service):
    total, bad_every = 300, 50
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(total, bad_every=bad_every))
    sets = [*service, "source.bounded=true", "checkpoint.interval=1s"]
    run_cli("run", JOB, *topic_args(kafka, names, dead_letters=True),
            *[a for s in sets for a in ("--set", s)])  # fmt: skip
    out = [json.loads(v)["id"] for v in read_all(kafka, names("out"))]
    dead = [json.loads(v) for v in read_all(kafka, names("dlq"))]
    refused = [json.loads(base64.b64decode(d["value_b64"]))["id"] for d in dead
               if d["stage"] == "enrich"]  # fmt: skip
    # Every valid record once, enriched or refused by the client; the malformed ones as
    # parse dead letters (the demo's client refuses none).
    assert sorted(out + refused) == [i for i in range(total) if i % bad_every != bad_every - 1]
    assert len([d for d in dead if d["stage"] == "parse"]) == total // bad_every
