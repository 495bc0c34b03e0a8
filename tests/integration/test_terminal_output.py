"""What a local run shows on the terminal while things go wrong: a stop while records flow at
full speed ends as cleanly as an idle one, and failing checkpoints say why."""

from __future__ import annotations

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce
from tests.integration.helpers import RunningJob
from tests.support import topic_args

pytestmark = pytest.mark.integration

STACK_TRACE_MARKS = ("Traceback", "Exception in thread", "\tat ", "Caused by", "grpc")


def _enrich(kafka, names, service, *extra):
    return [
        "enrich",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        f"demo_service.url={service.url}",
        *extra,
    ]


@pytest.mark.parametrize("round_", [1, 2, 3])
def test_a_stop_under_full_load_ends_cleanly(kafka, names, enrichment_service, round_):
    """A stop under full load ends on `job enrich canceled`, with no stack trace on the way
    (such as Beam's data-plane thread dying as the JVM goes: "Multiplexer hanging up")."""
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    # Far more input than is read between two progress lines (every 2 s), so the stop comes
    # while records flow (an idle machine reads 150,000 between two lines).
    produce(kafka, names("in"), demo_values(400_000, bad_every=100))
    enrichment_service.configure(latency_ms=5)
    job = RunningJob(*_enrich(kafka, names, enrichment_service))
    try:
        job.wait_for(r"records in ([2-9]\d{4}|[1-3]\d{5}),", 180)  # 20,000 to 399,999 in
    finally:
        code = job.interrupt()
    assert code == 0, job.output
    assert job.lines[-1] == "job enrich canceled", job.output
    for mark in STACK_TRACE_MARKS:
        assert mark not in job.output, job.output


def test_failing_checkpoints_say_why(kafka, names, enrichment_service):
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(300))
    # Lookups that stay in flight for the whole test: every checkpoint expires. (With lookups
    # that merely time out, all 300 records reached the dead letters within seconds and
    # checkpoints completed from then on: on a loaded machine the first status line can
    # come after that.)
    enrichment_service.configure(latency_ms=600_000)
    job = RunningJob(
        *_enrich(kafka, names, enrichment_service),
        "--set",
        "enrichment.timeout=10min",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        "checkpoint.timeout=1s",
        "--set",
        "checkpoint.tolerable_failures=100",
        "--set",
        "sink.transaction_timeout=1min",
        "--skip-preflight",
    )
    try:
        # Failures counted, with the reason of the last one. (How many completed is not the
        # point: the first checkpoint can complete before any lookup is in flight.)
        job.wait_for(
            r"checkpoints \d+ completed, [1-9]\d* failed \(last: Checkpoint expired before "
            r"completing\.\)$",
            120,
        )
    finally:
        assert job.interrupt() == 0, job.output
