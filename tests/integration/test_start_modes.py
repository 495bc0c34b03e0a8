"""Each consumer start mode yields exactly the expected records (read back read_committed)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipelines_dev.topics import create_topics, end_offsets, produce, read_all
from tests.integration.helpers import RunningJob
from tests.support import assert_nothing_committed, run_cli, topic_args

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 50


def _seed(kafka, names, timestamps=None):
    create_topics(kafka, {names("in"): PARTITIONS, names("out"): PARTITIONS})
    for p in range(PARTITIONS):
        produce(
            kafka,
            names("in"),
            [f"p{p}-{i}" for i in range(PER_PARTITION)],
            partition=p,
            timestamps=timestamps,
        )


def _args(kafka, names, *extra):
    return ["passthrough", *topic_args(kafka, names), "--set", "checkpoint.interval=1s", *extra]


def _bounded(kafka, names, *extra, check=True):
    return run_cli("run", *_args(kafka, names, "--set", "source.bounded=true", *extra), check=check)


def _out(kafka, names) -> list[str]:
    return sorted(v.decode() for v in read_all(kafka, names("out")))


def _records(ranges: dict[int, range]) -> list[str]:
    return sorted(f"p{p}-{i}" for p, r in ranges.items() for i in r)


ALL = {p: range(PER_PARTITION) for p in range(PARTITIONS)}


def test_earliest_reads_everything(kafka, names):
    _seed(kafka, names)
    _bounded(kafka, names, "--set", "source.start.mode=earliest")
    assert _out(kafka, names) == _records(ALL)


def test_group_offsets_resume_from_committed(kafka, names):
    _seed(kafka, names)
    committed = {0: 10, 1: 25, 2: 49}
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": names("group")})
    consumer.commit(
        offsets=[TopicPartition(names("in"), p, o) for p, o in committed.items()],
        asynchronous=False,
    )
    consumer.close()
    _bounded(
        kafka,
        names,
        "--set",
        "source.start.mode=group-offsets",
        "--set",
        "source.start.fallback=latest",
    )
    assert _out(kafka, names) == _records(
        {p: range(o, PER_PARTITION) for p, o in committed.items()}
    )


def test_group_offsets_without_commit_fall_back_to_earliest(kafka, names):
    _seed(kafka, names)
    _bounded(
        kafka,
        names,
        "--set",
        "source.start.mode=group-offsets",
        "--set",
        "source.start.fallback=earliest",
    )
    assert _out(kafka, names) == _records(ALL)


def test_group_offsets_without_commit_fall_back_to_latest(kafka, names):
    _seed(kafka, names)
    _bounded(
        kafka,
        names,
        "--set",
        "source.start.mode=group-offsets",
        "--set",
        "source.start.fallback=latest",
    )
    assert_nothing_committed(kafka, names("out"))


def test_group_offsets_without_commit_and_fallback_fail_stops_the_job(kafka, names):
    _seed(kafka, names)
    proc = _bounded(
        kafka,
        names,
        "--set",
        "source.start.mode=group-offsets",
        "--set",
        "source.start.fallback=fail",
        "--set",
        "restart.strategy=none",
        check=False,
    )
    assert proc.returncode != 0
    assert "error: job passthrough failed:" in proc.stderr
    assert "NoOffsetForPartitionException" in proc.stderr or "no reset policy" in proc.stderr
    assert_nothing_committed(kafka, names("out"))


def test_specific_offsets_with_fallback_for_unlisted(kafka, names):
    _seed(kafka, names)
    topic = names("in")
    _bounded(
        kafka,
        names,
        "--set",
        "source.start.mode=specific-offsets",
        "--set",
        f"source.start.offsets=[{{topic: {topic}, partition: 0, offset: 10}}, "
        f"{{topic: {topic}, partition: 1, offset: 20}}]",
        "--set",
        "source.start.fallback=earliest",
    )
    assert _out(kafka, names) == _records({0: range(10, 50), 1: range(20, 50), 2: range(50)})


def test_timestamp_starts_at_first_record_at_or_after_it(kafka, names):
    # Recent timestamps: records older than the broker's retention (7 days) may be deleted
    # by its next retention check, active segment included, and a 2023 base made this test
    # read nothing whenever that check (every 5 min) fell inside it.
    base = (int(time.time()) - 3600) * 1000
    _seed(kafka, names, timestamps=[base + i * 1000 for i in range(PER_PARTITION)])
    start = datetime.fromtimestamp(base / 1000 + 30, timezone.utc).isoformat()  # base + 30 s
    _bounded(
        kafka,
        names,
        "--set",
        "source.start.mode=timestamp",
        "--set",
        f"source.start.timestamp={start}",
    )
    assert _out(kafka, names) == _records({p: range(30, PER_PARTITION) for p in range(PARTITIONS)})


def test_latest_skips_what_was_there_before_the_job(kafka, names):
    _seed(kafka, names)
    job = RunningJob(*_args(kafka, names, "--set", "source.start.mode=latest"))
    try:
        # Once a checkpoint has completed, the start offsets are fixed.
        job.wait_for(r"checkpoints [1-9]\d* completed", 120)
        for p in range(PARTITIONS):
            produce(kafka, names("in"), [f"p{p}-{i}" for i in range(100, 110)], partition=p)
        expected = _records({p: range(100, 110) for p in range(PARTITIONS)})
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _out(kafka, names) != expected:
            time.sleep(1)
        assert _out(kafka, names) == expected
    finally:
        assert job.interrupt() == 0, job.output
    assert "stopping (SIGINT): cancelling the job" in job.output
    assert end_offsets(kafka, names("out"), "read_committed") == end_offsets(kafka, names("out"))
