"""`make bench-soak`'s arithmetic: growth is the last minute's median over the first minute's
after warm-up, checkpoints are read once each from a history that repeats them, ids are
counted once however often they show, and the verdict is given for memory and checkpoint
duration only."""

from __future__ import annotations

import pytest

from bench.soak import Checkpoint, CountingObserver, Sample, Soak, completed_checkpoints, growth
from bench.soak import table as soak_table

pytestmark = pytest.mark.unit


def test_growth_compares_the_last_minute_with_the_first_after_warm_up():
    warm = [(float(t), 1000.0) for t in range(0, 120)]  # warm-up: not judged, however high
    warm[5] = (5.0, 9000.0)
    steady = [(float(t), 2000.0) for t in range(120, 540)]
    rising = [(float(t), 2100.0) for t in range(540, 601)]
    assert growth(warm + steady + rising, warmup_s=120, end_s=600) == pytest.approx(0.05)
    assert growth(warm + steady, warmup_s=120, end_s=600) is None  # nothing in the last minute


def test_each_checkpoint_is_taken_once_from_a_repeating_history():
    known: set[int] = set()
    first = [
        {"id": 2, "status": "COMPLETED", "latest_ack_timestamp": 13_000,
         "end_to_end_duration": 40, "checkpointed_size": 5_000},
        {"id": 3, "status": "IN_PROGRESS", "latest_ack_timestamp": 0},
        {"id": 1, "status": "FAILED", "latest_ack_timestamp": 9_000},
    ]  # fmt: skip
    taken = completed_checkpoints(first, 10_000, known)
    assert taken == [Checkpoint(2, 3.0, 40, 5_000)]
    again = [
        {"id": 3, "status": "COMPLETED", "latest_ack_timestamp": 18_000,
         "end_to_end_duration": 55, "state_size": 6_000},
        *first,
    ]  # fmt: skip
    assert completed_checkpoints(again, 10_000, known) == [Checkpoint(3, 8.0, 55, 6_000)]


def test_ids_are_counted_once_and_repeats_are_duplicates():
    observer = CountingObserver.__new__(CountingObserver)  # no consumer: the counting alone
    observer.seen, observer.distinct, observer.duplicates = bytearray(1), 0, 0
    for i in (0, 7, 7, 8, 100_000, 0):
        observer.note(i)
    assert (observer.distinct, observer.duplicates) == (4, 2)


def test_the_verdict_is_given_for_memory_and_checkpoint_duration():
    soak = Soak(rate=1000.0, duration_s=300.0, warmup_s=120.0, produced=10, distinct=10)
    soak.samples = [Sample(float(t), 1000.0 if t < 240 else 1100.0, 0, 0) for t in range(300)]
    soak.checkpoints = [Checkpoint(i, float(i), 20, 4000) for i in range(300)]
    rows = {line.split("  ")[0]: line for line in soak_table(soak).splitlines()}
    assert rows["RSS of the job's processes"].endswith("+10.0% not met")
    assert rows["checkpoint duration"].endswith("+0.0%     met")
    assert rows["checkpointed size"].endswith("-")
    assert "delivered: 10 of 10 records produced, 0 duplicates" in soak_table(soak)
