"""A savepoint taken by an earlier version of the code restores into today's enrich job.

The fixture (tests/fixtures/savepoint-enrich, made by savepoint_fixture.py at the commit
its made.json names, before the package was regrouped) holds the Kafka source's positions
after 300 records, the sinks' committer state and every stateful operator's state, each
under its operator's uid. Restoring it without --allowNonRestoredState fails if any of those
uids is gone; reading from anywhere but the restored positions shows in the output (the
group never committed, and its fallback is `fail`)."""

from __future__ import annotations

import json
import shutil

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, delete_topics, produce, read_all
from tests.integration.helpers import RunningJob
from tests.integration.savepoint_fixture import (
    FIXTURE,
    NAMES,
    PARTITIONS,
    RECORDS,
    fixture_names,
)
from tests.support import restored_state_only, topic_args, wait_until

pytestmark = pytest.mark.integration

LATER = 200  # records produced after the savepoint's positions


def test_a_savepoint_from_before_the_move_restores_every_operator(
    kafka, enrichment_service, tmp_path
):
    made = json.loads((FIXTURE / "made.json").read_text())
    assert made["names"] == NAMES and made["records_read"] == RECORDS
    topics = [NAMES["in"], NAMES["out"], NAMES["dlq"]]
    delete_topics(kafka, topics)  # a broker shared with an earlier session may hold them
    create_topics(kafka, {NAMES["in"]: PARTITIONS, NAMES["out"]: PARTITIONS, NAMES["dlq"]: 1})
    # The same values at the same offsets as when the savepoint was taken, and LATER more.
    produce(kafka, NAMES["in"], demo_values(RECORDS + LATER))
    savepoint = tmp_path / "savepoint"
    shutil.copytree(FIXTURE / "savepoint", savepoint)
    job = RunningJob(
        "enrich",
        *topic_args(kafka, fixture_names, dead_letters=True),
        "--set",
        f"demo_service.url={enrichment_service.url}",
        "--set",
        "checkpoint.interval=1s",
        "--from-checkpoint",
        str(savepoint),
        # The fixture is older than any transaction timeout, which the restore-age check
        # refuses by default; its transactions held nothing uncommitted (it was taken once
        # every record it had read was visible to read_committed), so nothing is lost.
        "--accept-transaction-loss",
        *restored_state_only(fixture_names),
    )
    try:
        wait_until(
            lambda: len(read_all(kafka, NAMES["out"])) >= LATER or job.proc.poll() is not None,
            180,
            "the restored job's output",
        )
        restored = job.restored()
    finally:
        code = job.interrupt()
    assert code == 0, job.output
    assert restored and restored["is_savepoint"] is True, restored
    out = sorted(json.loads(v)["id"] for v in read_all(kafka, NAMES["out"]))
    # Round-robin: record i is at partition i % 3, offset i // 3; the savepoint holds
    # offset 100 for each partition, so exactly the later records are read, each once.
    assert out == list(range(RECORDS, RECORDS + LATER)), job.output[-3000:]
    assert read_all(kafka, NAMES["dlq"]) == []


def test_a_savepoint_of_another_job_is_one_line_naming_the_state_it_cannot_place(kafka, tmp_path):
    """The enrich job's savepoint handed to passthrough, which has no enrichment or
    dead-letter operators: Flink refuses the restore; the run says so in one line (the
    gateway is ended only after the error was read from it) and exits 1."""
    topics = [NAMES["in"], NAMES["out"]]
    delete_topics(kafka, topics)
    create_topics(kafka, {NAMES["in"]: PARTITIONS, NAMES["out"]: PARTITIONS})
    savepoint = tmp_path / "savepoint"
    shutil.copytree(FIXTURE / "savepoint", savepoint)
    job = RunningJob(
        "passthrough",
        *topic_args(kafka, fixture_names),
        "--from-checkpoint",
        str(savepoint),
        "--accept-transaction-loss",  # as above: the refusal tested here is Flink's
        *restored_state_only(fixture_names),
    )
    code = job.wait(120)
    errors = [line for line in job.output.splitlines() if line.startswith("error: ")]
    assert code == 1, job.output
    assert "Traceback" not in job.output, job.output
    assert len(errors) == 1, job.output
    assert "Cannot map checkpoint/savepoint state for operator" in errors[0], errors
    assert "--allowNonRestoredState" in errors[0] or errors[0].endswith(" ..."), errors
