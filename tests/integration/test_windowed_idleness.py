"""Event-time windows over a 3-partition topic whose partitions go quiet.

The source stays unbounded here on purpose: a bounded source ends with a final watermark
that closes every window and would hide the very stall these tests are about.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from pipelines_dev.topics import create_topics, produce, read_all
from tests.integration.helpers import RunningJob
from tests.support import assert_nothing_committed, topic_args

pytestmark = pytest.mark.integration

BASE = 1_700_000_000_000  # a multiple of the 10 s window
KEYS = ["a", "b", "c", "d"]


def record(i: int, ts: int) -> bytes:
    return json.dumps({"id": i, "key": KEYS[i % len(KEYS)], "ts": ts}).encode()


def seed(kafka, names, partitions_active_after_first_window: list[int]) -> list[tuple[str, int]]:
    """Window [0, 10 s): 100 records on each of 3 partitions. Then 10 s..60 s: records only
    on the given partitions. Returns (key, ts) of every record."""
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("late"): 1, names("dlq"): 1})
    sent = []
    i = 0
    for p in range(3):
        batch = []
        for step in range(100):
            ts = BASE + step * 100
            batch.append(record(i, ts))
            sent.append((KEYS[i % len(KEYS)], ts))
            i += 1
        produce(kafka, names("in"), batch, partition=p)
    for p in partitions_active_after_first_window:
        batch = []
        for step in range(100, 600):
            ts = BASE + step * 100
            batch.append(record(i, ts))
            sent.append((KEYS[i % len(KEYS)], ts))
            i += 1
        produce(kafka, names("in"), batch, partition=p)
    return sent


def expected_counts(sent, windows: int) -> dict[tuple[str, int], int]:
    counts = Counter((key, BASE + (ts - BASE) // 10_000 * 10_000) for key, ts in sent)
    return {k: c for k, c in counts.items() if k[1] < BASE + windows * 10_000}


def job_args(kafka, names, *extra):
    return [
        "windowed",
        *topic_args(kafka, names, dead_letters=True, late=True),
        "--set",
        "source.start.mode=earliest",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        "watermarks.max_out_of_orderness=1s",
        *extra,
    ]


def window_counts(kafka, names) -> dict[tuple[str, int], int]:
    out = [json.loads(v) for v in read_all(kafka, names("out"))]
    counts = {(r["key"], r["window_start"]): r["count"] for r in out}
    assert len(counts) == len(out), "a window was emitted twice"
    return counts


def wait_for_counts(kafka, names, job, expected, timeout):
    deadline = time.monotonic() + timeout
    got = {}
    while time.monotonic() < deadline and job.proc.poll() is None:
        got = window_counts(kafka, names)
        if len(got) >= len(expected):
            break
        time.sleep(1)
    return got


def test_windows_close_when_two_partitions_go_idle(kafka, names):
    sent = seed(kafka, names, partitions_active_after_first_window=[0])
    # p0's watermark reaches 60 s - 1 s: windows ending at or before 59 s close (5 windows).
    expected = expected_counts(sent, windows=5)
    job = RunningJob(
        *job_args(kafka, names, "--set", "watermarks.idleness=2s", "--set", "job.parallelism=3")
    )
    try:
        started = time.monotonic()
        got = wait_for_counts(kafka, names, job, expected, timeout=90)
        took = time.monotonic() - started
        print(f"idleness on: {len(got)} window counts after {took:.0f} s")
        assert got == expected

        # A record for the first window is now later than allowed: it goes to the late topic.
        produce(
            kafka,
            names("in"),
            [json.dumps({"id": 99_999, "key": "late-key", "ts": BASE + 1234}).encode()],
            partition=0,
        )
        deadline = time.monotonic() + 30
        late = []
        while time.monotonic() < deadline and not late:
            late = [json.loads(v) for v in read_all(kafka, names("late"))]
            time.sleep(0.5)
        assert [(r["key"], r["event_time"]) for r in late] == [("late-key", BASE + 1234)]
        assert window_counts(kafka, names) == expected  # the late record changed no count
    finally:
        assert job.interrupt() == 0, job.output


def test_without_idleness_the_same_input_leaves_windows_open(kafka, names):
    seed(kafka, names, partitions_active_after_first_window=[0])
    job = RunningJob(
        *job_args(kafka, names, "--set", "watermarks.idleness=null", "--set", "job.parallelism=3")
    )
    try:
        # Long enough for the job to read everything and checkpoint many times over; with
        # idleness (previous test) all five windows were out well within this.
        job.wait_for(r"records in 800,", 90)  # 3 x 100 + 500: every record read
        time.sleep(10)
        got = window_counts(kafka, names)
        print(f"idleness off: {len(got)} window counts after reading all input")
        assert got == {}
    finally:
        assert job.interrupt() == 0, job.output


def test_parallelism_above_partition_count_still_fires(kafka, names):
    sent = seed(kafka, names, partitions_active_after_first_window=[0, 1, 2])
    expected = expected_counts(sent, windows=5)
    job = RunningJob(
        *job_args(kafka, names, "--set", "watermarks.idleness=2s", "--set", "job.parallelism=4")
    )
    try:
        got = wait_for_counts(kafka, names, job, expected, timeout=90)
        assert got == expected
    finally:
        assert job.interrupt() == 0, job.output


def test_a_far_future_event_time_is_a_dead_letter_not_a_watermark_jump(kafka, names):
    """One record two hours ahead of the clock, mid-partition: let through, it would move
    the watermark past every later record, all of them late (and, measured with the skew
    check off, worse: the late sink writes it with its event time, Kafka 4 refuses a
    timestamp over 1 h ahead, log.message.timestamp.after.max.ms, and the job fails on it
    after every restart). With watermarks.max_future_skew (1 h by default) it is a dead
    letter, and every window counts exactly."""
    from tests.support import run_cli

    create_topics(kafka, {names("in"): 1, names("out"): 1, names("late"): 1, names("dlq"): 1})
    before = [record(i, BASE + i * 100) for i in range(50)]
    future_ts = int(time.time() * 1000) + 2 * 3_600_000
    future = json.dumps({"id": 50, "key": "a", "ts": future_ts}).encode()
    after = [record(i, BASE + i * 100) for i in range(51, 101)]
    produce(kafka, names("in"), [*before, future, *after], partition=0)
    run_cli("run", *job_args(kafka, names, "--set", "source.bounded=true"), timeout=300)
    sent = [(KEYS[i % len(KEYS)], BASE + i * 100) for i in [*range(50), *range(51, 101)]]
    assert window_counts(kafka, names) == expected_counts(sent, windows=100)
    assert_nothing_committed(kafka, names("late"))
    [dead] = [json.loads(v) for v in read_all(kafka, names("dlq"))]
    assert dead["origin"]["offset"] == 50
    assert dead["error"].startswith(f"ts {future_ts} is ")
    assert dead["error"].endswith(
        "ms ahead of processing time, more than watermarks.max_future_skew (3600000 ms): it "
        "would make every later record of its partition late"
    )
