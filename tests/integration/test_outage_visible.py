"""An enrichment outage is visible: preflight names a service that does not answer, and a
running job counts lookups, failures, retries, records marked missing and dead letters as
Flink metrics, shown in its progress line. Each policy is run through a total outage and
its counts are checked exactly, against the broker and against the progress line."""

from __future__ import annotations

import json
import re

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce, read_all
from tests.integration.helpers import RunningJob
from tests.support import (
    assert_nothing_committed,
    committed_count,
    run_cli,
    topic_args,
    wait_until,
)

pytestmark = pytest.mark.integration

N = 200
RETRIES = 2


@pytest.fixture
def outage(kafka, names, enrichment_service):
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(N))
    enrichment_service.configure(latency_ms=1, down=True)
    return [
        "enrich",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        f"demo_service.url={enrichment_service.url}",
        "--set",
        f"enrichment.retries={RETRIES}",
        "--set",
        "enrichment.backoff=10ms",
        "--set",
        "checkpoint.interval=1s",
    ]


def _counts(job: RunningJob, pattern: str, timeout: float = 120) -> re.Match:
    return job.wait_for(pattern, timeout)


@pytest.mark.parametrize("policy", ["dead-letter", "mark-missing"])
def test_total_outage_is_counted_exactly_under(policy, kafka, names, outage, enrichment_service):
    job = RunningJob(*outage, "--set", f"enrichment.on_failure={policy}")
    attempts = N * (RETRIES + 1)
    missing = N if policy == "mark-missing" else 0
    dead = N if policy == "dead-letter" else 0
    try:
        line = _counts(
            job,
            rf"lookups {attempts} \(failed {attempts}, retried {N * RETRIES}\), "
            rf"marked missing {missing} \| dead letters {dead} \|",
        )
        # Counted is not committed: the records reach a read_committed reader when the
        # checkpoint after them completes, and Ctrl-C cancels (it does not drain), so
        # stopping on the progress line alone races that checkpoint on a busy machine.
        written = names("dlq") if policy == "dead-letter" else names("out")
        wait_until(lambda: committed_count(kafka, written) >= N, 120, f"{N} committed")
    finally:
        assert job.interrupt() == 0, job.output
    print(line.string)
    out = [json.loads(v) for v in read_all(kafka, names("out"))]
    dlq = [json.loads(v) for v in read_all(kafka, names("dlq"))]
    reason = f"HTTP 503 from {enrichment_service.url}/lookup/batch ({RETRIES + 1} attempts)"
    if policy == "dead-letter":
        assert_nothing_committed(kafka, names("out"))
        assert sorted(d["origin"]["offset"] for d in dlq) == sorted(
            i // 3 for i in range(N)
        )  # round-robin over 3 partitions
        assert {d["error"] for d in dlq} == {f"enrichment unavailable: {reason}"}
        assert all(d["stage"] == "enrich" for d in dlq)
        assert sorted(
            json.loads(__import__("base64").b64decode(d["value_b64"]))["id"] for d in dlq
        ) == list(range(N))
    else:
        assert_nothing_committed(kafka, names("dlq"))
        assert sorted(r["id"] for r in out) == list(range(N))
        assert {r["enrichment_error"] for r in out} == {reason}
        assert all(r["enrichment"] is None for r in out)


def test_total_outage_under_fail_fails_the_job_and_writes_nothing(kafka, names, outage):
    proc = run_cli(
        "run",
        *outage,
        "--set",
        "enrichment.on_failure=fail",
        "--set",
        "restart.attempts=1",
        "--set",
        "restart.delay=3s",
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert re.fullmatch(
        r"error: job enrich failed: EnrichmentFailed: enrichment of record "
        r"\d+ failed: HTTP 503 from http://127\.0\.0\.1:\d+/lookup/batch "
        r"\(3 attempts\)",
        line,
    ), line
    assert_nothing_committed(kafka, names("out"))
    assert_nothing_committed(kafka, names("dlq"))
    # One line per failure with its cause: the first restarts the job (3 s later, in sight
    # of the 2 s progress poll); the second ends it, and the error line says so if the
    # mini-cluster is gone before it is polled. The traces are in the file the lines name.
    failures = [line for line in proc.stdout.splitlines() if line.startswith("failure #")]
    assert 1 <= len(failures) <= 2, proc.stdout
    for number, failure in enumerate(failures, 1):
        assert re.fullmatch(
            rf"failure #{number} in .+: EnrichmentFailed: enrichment of record \d+ failed: "
            rf"HTTP 503 from http://127\.0\.0\.1:\d+/lookup/batch \(3 attempts\); "
            rf"full trace in (\S+/enrich-failures\.log)",
            failure,
        ), failure
    trace_file = re.search(r"full trace in (\S+)$", failures[0]).group(1)
    with open(trace_file) as traces:
        assert traces.read().count("EnrichmentFailed") >= len(failures)
    for text in (proc.stdout, proc.stderr):
        assert "Traceback" not in text and "\tat " not in text and "Caused by" not in text


def test_preflight_names_an_enrichment_service_that_does_not_answer(kafka, names, outage):
    dead_url = "http://127.0.0.1:1"
    proc = run_cli("doctor", *outage, "--set", f"demo_service.url={dead_url}", check=False)
    assert proc.returncode == 2
    assert (
        f"error: demo_service.url: no enrichment service answered at {dead_url} within 5s "
        f"(Connection refused); start it (the demo: `make enrichment-up`) or pass "
        f"--skip-preflight"
    ) in proc.stdout
    assert proc.stderr.strip() == "error: preflight found 1 error(s); nothing was started"


def test_a_down_service_still_answers_preflight(kafka, names, outage):
    """503s mean the service is there (and the job's policy decides); only silence fails."""
    proc = run_cli("doctor", *outage)
    assert "enrich: config valid, preflight passed, jars present" in proc.stdout
