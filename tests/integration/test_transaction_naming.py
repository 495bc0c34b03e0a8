"""`sink.transaction_naming`: how many transactional ids a job leaves on the broker, read
from the broker itself (Kafka's kafka-transactions tool), with the output still exactly once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.kafka_broker import listed_transactions
from pipelines_dev.topics import create_topics, produce, read_all
from tests.integration.helpers import RunningJob
from tests.support import committed_count, topic_args, wait_until

pytestmark = pytest.mark.integration

CHECKPOINTS = 6


def transactional_ids(kafka: str, prefix: str) -> set[str]:
    """Every transactional id the broker holds state for under `prefix`, in any state
    (ongoing, committed, empty): what it keeps until transactional.id.expiration.ms."""
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines_dev.commands", "kafka", "transactions"]
        + ["--bootstrap-server", kafka, "list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = {row.transactional_id for row in listed_transactions(proc.stdout)}
    return {tid for tid in ids if tid.startswith(prefix)}


def test_pooling_reuses_a_few_transactional_ids_where_incrementing_takes_one_per_checkpoint(
    kafka, names
):
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    # Records for both sinks (output and dead letters) in every checkpoint: an id is
    # registered on the broker when its producer first writes.
    values = demo_values(200 * 100, bad_every=100)
    fed = 0

    def fed_through(checkpoints: int) -> bool:
        nonlocal fed
        if fed < len(values):
            produce(kafka, names("in"), values[fed : fed + 200])
            fed += 200
        return job.checkpoints()[0] >= checkpoints

    job = RunningJob(
        "passthrough",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "parse.validate_records=true",  # through Python and RecordSerializer, not the raw copy
        "--set",
        "checkpoint.interval=300ms",
        "--set",
        "sink.transaction_naming=pooling",
    )
    try:
        wait_until(
            lambda: fed_through(CHECKPOINTS), 180, f"{CHECKPOINTS} completed checkpoints", 0.2
        )
        wait_until(
            lambda: (
                committed_count(kafka, names("out")) + committed_count(kafka, names("dlq")) >= fed
            ),
            120,
            f"all {fed} records fed committed to the output and dead letters",
        )
    finally:
        code = job.interrupt()
    assert code == 0, job.output
    completed = job.checkpoints()[0]

    sent = values[:fed]
    good = sorted(json.loads(v)["id"] for v in sent if v.startswith(b'{"id"'))
    out = [json.loads(v)["id"] for v in read_all(kafka, names("out"), isolation="read_committed")]
    assert sorted(out) == good
    dead = read_all(kafka, names("dlq"), isolation="read_committed")
    assert len(dead) == len(sent) - len(good) == fed // 100

    # Incrementing (the default) takes a new id per checkpoint for each of the two sinks,
    # output and dead letters: about 2 x 7 of them in a run like this.
    # Pooling: a pool per sink subtask, grown only while a commit is outstanding (2 each).
    ids = transactional_ids(kafka, names("tx"))
    assert 2 * completed > 8 and 2 <= len(ids) <= 8, (completed, sorted(ids))
