"""A local run triggers its first checkpoint the moment every task runs.

Exactly-once output is visible only once a checkpoint completes. Flink's periodic triggers
made while the tasks start (a Python stage starts its worker inside its task) are declined,
and the next comes an interval later; the run does not wait for it. With an interval of
an hour the periodic first trigger falls, at random, anywhere in that hour: a checkpoint
within the test's deadline comes from the run's own trigger (without it this test fails
about 49 times in 50).

What that first checkpoint holds is whatever the source had read when its barrier passed:
all 300 records here on a quick machine, fewer where the source's first fetch is slower.
The rest are committed by the next checkpoint, which with this interval is the savepoint
the test stops with; so the test waits for the checkpoint, not for all the output (a wait
for all of it can see the records split across the barrier). The 100 records it
writes after that checkpoint are split so on every machine."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce, read_all
from tests.integration.helpers import RunningJob
from tests.support import topic_args, wait_until

pytestmark = pytest.mark.integration


def _completed(job: RunningJob) -> int:
    """Checkpoints the REST API counts as completed (0 while it is not up yet)."""
    try:
        return job.checkpoint_stats()["counts"]["completed"]
    except OSError:  # between states, or not listening yet
        return 0


def test_the_first_checkpoint_comes_when_the_tasks_run_not_an_interval_later(kafka, names):
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    values = demo_values(400)
    produce(kafka, names("in"), values[:300])
    job = RunningJob(
        "passthrough",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "parse.validate_records=true",  # a Python stage: its worker starts inside the task
        "--set",
        "checkpoint.interval=1h",
        "--skip-preflight",
        "--savepoint-on-stop",
    )
    try:
        job.wait_for(r"REST/UI at http://", 120)
        # Flink's REST API caches checkpoint statistics for a few seconds: the wait covers it.
        wait_until(lambda: _completed(job) >= 1, 120, "the first checkpoint to complete")
        wait_until(lambda: job.checkpoints()[0] >= 1, 60, "a progress line counting it")
        completed, failed = job.checkpoints()
        # records after that checkpoint wait for the next: here, the savepoint
        produce(kafka, names("in"), values[300:])
        job.wait_for(r"records in 400,", 120)
    finally:
        code = job.interrupt()
    assert code == 0, job.output[-3000:]
    assert "savepoint written to" in job.output, job.output[-3000:]
    # the savepoint commits what the first checkpoint did not: every record, once
    out = Counter(json.loads(v)["id"] for v in read_all(kafka, names("out")))
    assert out == Counter(json.loads(v)["id"] for v in values)
    assert completed >= 1
    # a trigger declined while tasks started is not reported as a failed checkpoint
    assert failed == 0, job.output[-3000:]
