"""The enrichment job end to end: the report's scenario, savepoints, dead letters, cluster."""

from __future__ import annotations

import json
import time

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.enrichment_service import company_profile
from pipelines_dev.topics import (
    committed_offsets,
    create_topics,
    end_offsets,
    produce,
    read_all,
)
from tests.integration.helpers import RunningJob
from tests.support import (
    every_partition_committed,
    restored_state_only,
    run_cli,
    topic_args,
    wait_until,
)

pytestmark = pytest.mark.integration


def enrich_args(kafka, names, service, *extra, out="out"):
    return [
        "enrich",
        *topic_args(kafka, names, out=out, tx_suffix=f"-{out}", dead_letters=True),
        "--set",
        f"demo_service.url={service.url}",
        *extra,
    ]


def _decoded(kafka, topic) -> list[dict]:
    return [json.loads(v) for v in read_all(kafka, topic)]


def test_slow_enrichment_commits_offsets_on_every_checkpoint_and_resumes(
    kafka, names, enrichment_service
):
    """The slow-lookup report scaled down: 3 partitions, 3000 records, 250 ms lookups, 3 slots,
    2 s checkpoints. The topic takes ~10 checkpoint intervals to work through."""
    total = 3000
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("out2"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(total))
    enrichment_service.configure(latency_ms=250)
    job = RunningJob(
        *enrich_args(
            kafka,
            names,
            enrichment_service,
            "--set",
            "job.parallelism=3",
            "--set",
            "enrichment.capacity=5",
            "--set",
            "enrichment.max_capacity=5",  # fixed: the report's small capacity, not adapted
            "--set",
            "checkpoint.interval=2s",
        )
    )
    samples: list[tuple[float, int]] = []  # (when, committed total)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and job.proc.poll() is None:
            offsets = committed_offsets(kafka, names("group"), names("in"))
            samples.append((time.monotonic(), sum(max(o, 0) for o in offsets.values())))
            if samples[-1][1] >= total * 0.5:
                break
            time.sleep(0.25)
        stats = job.checkpoint_stats()
    finally:
        assert job.interrupt() == 0, job.output
    totals = [t for _, t in samples]
    moves = sum(1 for (_, t), (_, before) in zip(samples[1:], samples) if t > before)
    completed = stats["counts"]["completed"]
    slowest = stats["summary"]["end_to_end_duration"]["max"]
    failed = [h for h in stats["history"] if h["status"] == "FAILED"]
    # Times from Flink's own checkpoint history, not measured around this test's polling
    # (a committed-offsets call can itself retry for 15 s on a busy machine).
    history = sorted(
        (h for h in stats["history"] if h["status"] == "COMPLETED"), key=lambda h: h["id"]
    )
    triggers = [h["trigger_timestamp"] for h in history]
    gaps = [b - a for a, b in zip(triggers, triggers[1:])]
    print(
        f"committed totals while running: {sorted(set(totals))}; {completed} checkpoints "
        f"completed, slowest {slowest} ms, trigger gaps {gaps} ms, {len(failed)} failed"
    )
    assert totals == sorted(totals), "committed offsets went backwards"
    assert totals[-1] >= total * 0.5, f"offsets stalled at {totals[-1]}:\n{job.output}"
    assert failed == []
    # No checkpoint waits for more than two enrichment timeouts (2 s each here): a slow
    # lookup never holds a barrier for long.
    assert slowest <= 2 * 2000
    # Checkpoints kept coming every interval (2 s), a slow lookup never delaying the next
    # by more than the slowest checkpoint's own duration.
    assert len(gaps) >= 4 and max(gaps) <= 2000 + slowest + 500, gaps
    # And their completions moved the committed offsets, time after time.
    assert moves >= 5

    stopped_at = committed_offsets(kafka, names("group"), names("in"))
    ends = end_offsets(kafka, names("in"))
    # Restart with group-offsets into a second output topic: it starts where the group stopped.
    enrichment_service.configure(latency_ms=5)
    run_cli(
        "run",
        *enrich_args(
            kafka,
            names,
            enrichment_service,
            "--set",
            "source.bounded=true",
            "--set",
            "enrichment.capacity=100",
            out="out2",
        ),
    )
    second = _decoded(kafka, names("out2"))
    first_offsets = {}
    for record in second:
        p, o = record["_origin"]["partition"], record["_origin"]["offset"]
        first_offsets[p] = min(o, first_offsets.get(p, o))
    assert first_offsets == {p: o for p, o in stopped_at.items() if o < ends[p]}
    assert len(second) == sum(ends[p] - stopped_at[p] for p in ends)
    # Records were produced round-robin: record i sits at partition i % 3, offset i // 3.
    # The restart read exactly those at or after the committed offsets, each once.
    assert sorted(r["id"] for r in second) == [
        i for i in range(total) if i // 3 >= stopped_at[i % 3]
    ]


def test_savepoint_resume_at_another_parallelism_is_exactly_once_with_bad_records_dead_lettered(
    kafka, names, enrichment_service
):
    """Ctrl-C with --savepoint-on-stop at parallelism 1, resumed from the savepoint at 3 with
    a group that never committed: every valid id once, every bad record a dead letter."""
    total, bad_every = 1500, 50
    values = demo_values(total, bad_every=bad_every)
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), values)
    enrichment_service.configure(latency_ms=100)
    args = enrich_args(
        kafka,
        names,
        enrichment_service,
        "--set",
        "enrichment.capacity=10",
        "--set",
        "enrichment.max_capacity=10",  # fixed: the stop must find records still to read
        "--set",
        "checkpoint.interval=1s",
    )
    first = RunningJob(*args, "--savepoint-on-stop", "--set", "job.parallelism=1")
    try:
        # Stopped once every partition has a committed position
        # (tests.support.every_partition_committed): the savepoint holds one for each split.
        deadline = time.monotonic() + 120
        while not every_partition_committed(kafka, names("group"), names("in")):
            assert time.monotonic() < deadline, f"not every partition read:\n{first.output}"
            assert first.proc.poll() is None, first.output
            time.sleep(0.5)
    finally:
        assert first.interrupt() == 0, first.output
    savepoint = first.wait_for(r"savepoint written to (\S+)").group(1)

    enrichment_service.configure(latency_ms=5)
    # Only the savepoint's state can give the second run positions to read from.
    second = RunningJob(*args, "--from-checkpoint", savepoint, *restored_state_only(names),
                        "--set", "job.parallelism=3")  # fmt: skip
    valid_ids = {json.loads(v)["id"] for v in values if v.startswith(b'{"id"')}
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            out, dlq = _decoded(kafka, names("out")), _decoded(kafka, names("dlq"))
            if len(out) + len(dlq) >= total:
                break
            time.sleep(2)
        restored, parallelism = second.restored(), second.parallelism()
    finally:
        assert second.interrupt() == 0, second.output
    assert restored and restored["is_savepoint"] is True, restored
    assert 3 in parallelism.values(), parallelism  # the rescale happened
    assert restored["external_path"].rstrip("/").endswith(savepoint.rstrip("/").split(":")[-1])
    out, dlq = _decoded(kafka, names("out")), _decoded(kafka, names("dlq"))
    print(f"input {total}, output {len(out)}, dead letters {len(dlq)}")
    assert f"resuming from {savepoint}" in second.output
    assert sorted(r["id"] for r in out) == sorted(valid_ids)  # each exactly once
    assert len(out) + len(dlq) == total
    for topic in (names("out"), names("dlq")):  # no transaction left open by either run
        assert end_offsets(kafka, topic, "read_committed") == end_offsets(kafka, topic)
    assert all(r["enrichment"] == company_profile(r["company"]) for r in out)
    bad_origins = sorted((d["origin"]["partition"], d["origin"]["offset"]) for d in dlq)
    # Produced round-robin over 3 partitions: value i is at (i % 3, i // 3).
    assert bad_origins == sorted(
        (i % 3, i // 3) for i, v in enumerate(values) if not v.startswith(b'{"id"')
    )
    assert {d["error"] for d in dlq} == {
        "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2",
        "missing required field(s): id",
    }


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_flowing_enrichment_emits_its_answers_when_the_input_goes_quiet(
    kafka, names, enrichment_service, mode
):
    """Answers the flowing stage holds go out without a checkpoint or more input: the
    batcher's drain marker after a quiet spell. At least once (no transactions), and the
    records produced only after the run's first checkpoint (triggered as soon as its tasks
    run), with the next one 10 minutes away: only that marker can bring out the last
    batches. (Without it this test failed: measured by taking the marker out.)"""
    total = 90
    create_topics(kafka, {names("in"): 1, names("out"): 1, names("dlq"): 1})
    sets = ["enrichment.operator=flowing", f"python.execution_mode={mode}",
            "sink.delivery=at-least-once", "checkpoint.interval=10min",
            "enrichment.batch_size=20", "enrichment.capacity=200"]  # fmt: skip
    enrichment_service.configure(latency_ms=200)
    job = RunningJob(*enrich_args(kafka, names, enrichment_service,
                                  *(a for item in sets for a in ("--set", item))))  # fmt: skip
    try:
        wait_until(
            lambda: (
                job.proc.poll() is not None or job.checkpoint_stats()["counts"]["completed"] >= 1
            ),
            180,
            "the first checkpoint",
            every=1,
        )
        produce(kafka, names("in"), demo_values(total))
        wait_until(
            lambda: len(read_all(kafka, names("out"))) >= total or job.proc.poll() is not None,
            180,
            "every answer out",
            every=1,
        )
        assert job.proc.poll() is None, job.output[-3000:]
        out = _decoded(kafka, names("out"))
    finally:
        assert job.interrupt() == 0, job.output
    assert sorted(r["id"] for r in out) == list(range(total))
    assert all(r["enrichment"] for r in out)


@pytest.mark.cluster
def test_enrich_submitted_with_flink_run(kafka, names, enrichment_service, flink_cluster):
    total = 400
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(total, bad_every=40))
    proc = run_cli(
        "submit", *enrich_args(kafka, names, enrichment_service, "--set", "source.bounded=true")
    )
    assert "Job has been submitted with JobID" in proc.stdout
    out, dlq = _decoded(kafka, names("out")), _decoded(kafka, names("dlq"))
    assert sorted(r["id"] for r in out) == [i for i in range(total) if i % 40 != 39]
    assert len(dlq) == total // 40
