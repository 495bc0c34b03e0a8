"""Exactly once under faults: kill things, then demand every input id exactly once.

Each test feeds N uniquely numbered records, breaks something mid-stream, lets the job
recover, and reads the output with read_committed: the multiset of ids must equal the
input set (nothing lost, nothing twice), and no transaction may be left open (the last
stable offset reaches the log end).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections import Counter

import pytest

from pipelines.running.processes import descendants
from pipelines_dev.demo import demo_values
from pipelines_dev.faults import signal_all
from pipelines_dev.topics import (
    committed_offsets,
    create_topics,
    end_offsets,
    produce,
    read_all,
)
from tests.integration.helpers import RunningJob
from tests.support import (
    CLI,
    ROOT,
    assert_nothing_committed,
    every_partition_committed,
    kill_tree,
    process_tree,
    restored_state_only,
    run_cli,
    topic_args,
    wait_until,
)

pytestmark = pytest.mark.integration

N = 3000


@pytest.fixture
def job(kafka, names, enrichment_service, tmp_path):
    """Topics with N records, and the enrich job's arguments for them."""
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(N))
    args = [
        "enrich",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        f"demo_service.url={enrichment_service.url}",
        "--set",
        f"checkpoint.storage=file://{tmp_path}/checkpoints",
        "--set",
        f"checkpoint.savepoints=file://{tmp_path}/savepoints",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        "enrichment.capacity=20",
        "--set",
        "enrichment.max_capacity=20",  # fixed: the faults land while the job still reads
        "--set",
        "source.bounded=true",
    ]
    enrichment_service.configure(latency_ms=20)
    return args


def assert_exactly_once(kafka, topic, label: str, dead_letters: str | None = None) -> list[dict]:
    """Every input id once in `topic`, no transaction open; and, every input being valid,
    nothing in `dead_letters` (a record dead-lettered by a fault would be "lost" there)."""
    if dead_letters:
        assert_nothing_committed(kafka, dead_letters)
    records = [json.loads(v) for v in read_all(kafka, topic)]
    counts = Counter(r["id"] for r in records)
    duplicates = {i: c for i, c in counts.items() if c > 1}
    missing = set(range(N)) - set(counts)
    print(
        f"[{label}] input {N}, output {len(records)}, distinct {len(counts)}, "
        f"duplicates {len(duplicates)}, missing {len(missing)}"
    )
    assert not duplicates, f"ids written more than once: {sorted(duplicates)[:20]}"
    assert not missing, f"ids lost: {sorted(missing)[:20]}"
    assert len(records) == N
    # No transaction left open: read_committed can reach the end of every partition.
    assert end_offsets(kafka, topic, "read_committed") == end_offsets(kafka, topic)
    return records


def assert_out_and_dead_letters_exactly_once(kafka, names, service) -> None:
    """Every input id exactly once across the output and the dead letters (decoded from
    the original each dead letter carries); both topics without an open transaction."""
    import base64

    out = [json.loads(v)["id"] for v in read_all(kafka, names("out"))]
    dead = [json.loads(v) for v in read_all(kafka, names("dlq"))]
    dead_ids = [json.loads(base64.b64decode(d["value_b64"]))["id"] for d in dead]
    print(f"[outage, dead-letter] input {N}, output {len(out)}, dead letters {len(dead)}")
    assert dead, "the outage should have sent records to dead letters"
    assert {d["error"] for d in dead} == {
        f"enrichment unavailable: HTTP 503 from {service.url}/lookup/batch (2 attempts)"
    }
    assert sorted(out + dead_ids) == list(range(N))
    for topic in (names("out"), names("dlq")):
        assert end_offsets(kafka, topic, "read_committed") == end_offsets(kafka, topic)


def progress(kafka, names) -> int:
    return sum(max(o, 0) for o in committed_offsets(kafka, names("group"), names("in")).values())


def every_partition_started(kafka, names) -> bool:
    return every_partition_committed(kafka, names("group"), names("in"))


def progress_or_none(kafka, names) -> int | None:
    """The group's progress, or None when no broker answers (within a few seconds)."""
    from pipelines_dev.kafka_broker import broker_answers

    return progress(kafka, names) if broker_answers(kafka, timeout=3) else None


def local_path(uri: str) -> str:
    """file:/x, file:///x and /x alike."""
    return re.sub(r"^file:/*", "/", uri.rstrip("/"))


class Resumed:
    """A resumed run, and what Flink's REST API said of it while it ran."""

    def __init__(self, job: RunningJob, restored: dict | None, parallelism: dict[str, int]):
        self.job, self.restored, self.parallelism = job, restored, parallelism
        self.output = job.output


def resume_until_complete(kafka, names, *args: str) -> Resumed:
    """Run a resumed job until all N outputs are committed, then stop it.

    The run reads with a consumer group that has never committed, in group-offsets mode with
    fallback `fail`: only restored state gives it positions to read from, so output at all
    proves the restore (the original group's committed offsets would otherwise produce
    exactly-once output by themselves). Flink's REST API says what it was restored from and
    at which parallelism it runs.

    A bounded job restored from a checkpoint reads to its stopping offsets but never
    finishes: the connector's enumerator does not signal "no more splits" again after a
    restore (measured with connector 5.0.0-2.2). So the test waits for the output.
    """
    resumed = RunningJob(*args, *restored_state_only(names))
    try:
        wait_until(
            lambda: len(read_all(kafka, names("out"))) >= N or resumed.proc.poll() is not None,
            240,
            "all output committed",
            every=2,
        )
        assert resumed.proc.poll() is None, f"the resumed run ended:\n{resumed.output[-3000:]}"
        restored, parallelism = resumed.restored(), resumed.parallelism()
    finally:
        code = resumed.interrupt()
    assert code == 0, resumed.output
    assert restored is not None, "Flink reports no restore"
    return Resumed(resumed, restored, parallelism)


def recovers_from_an_injected_failure(
    kafka, names, tmp_path, job: list[str], label: str, reported: bool = True
):
    proc = run_cli(
        "run",
        *job,
        "--set",
        "faults.fail_after_records=1000",
        "--set",
        f"faults.marker_dir={tmp_path}",
        "--set",
        "restart.delay=1s",
    )
    assert (tmp_path / "fault-fired-0").exists(), "the fault never fired"
    # Flink counted the failure (the CLI prints each entry of the job's exception history)
    # and restarted the job: it then finished with every record.
    assert_exactly_once(kafka, names("out"), label, names("dlq"))
    output = proc.stdout + proc.stderr
    if reported:
        assert re.search(r"failure #1 in .*InjectedFault", output), output


def test_injected_task_failure_is_recovered_by_the_restart_strategy(kafka, names, job, tmp_path):
    recovers_from_an_injected_failure(kafka, names, tmp_path, job, "task failure")


def test_thread_mode_parse_recovers_from_an_injected_failure_exactly_once(kafka, names, tmp_path):
    """The validating passthrough with its parse stage inside the TaskManager's JVM
    (python.execution_mode: thread): a task failure mid-stream, a restart, nothing lost or
    written twice."""
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(N))
    job = ["passthrough", *topic_args(kafka, names, dead_letters=True)]
    for setting in (
        "parse.validate_records=true",
        "python.execution_mode=thread",
        "source.bounded=true",
        "checkpoint.interval=1s",
    ):
        job += ["--set", setting]
    # Not whether the CLI printed the failure: a job this short can fail and finish between
    # two looks at its exception history, and the look after the end found the history of
    # the finished job empty in 3 of 9 runs (an open finding, see docs/operations.md).
    recovers_from_an_injected_failure(
        kafka, names, tmp_path, job, "thread-mode task failure", reported=False
    )


def test_thread_mode_enrichment_recovers_from_an_injected_failure_exactly_once(
    kafka, names, job, tmp_path
):
    """The enrich job with its Python stage inside the TaskManager's JVM (python.execution_mode:
    thread, the flowing operator): batches of 20 with 10 in flight across batches at first,
    the bound adapting up to 100, drained before every 1 s checkpoint's barrier; a task
    failure mid-stream (after 1,000 records, whatever the rate), a restart, nothing lost or
    written twice."""
    thread = ["python.execution_mode=thread", "enrichment.operator=flowing",
              "enrichment.batch_size=20", "enrichment.capacity=200",
              "enrichment.max_capacity=2000"]  # fmt: skip
    args = [*job, *(a for item in thread for a in ("--set", item))]
    # The failure line is not asked for, as in the parse's thread-mode test just above.
    recovers_from_an_injected_failure(
        kafka, names, tmp_path, args, "thread-mode enrichment task failure", reported=False
    )


def test_killed_minicluster_process_resumes_from_latest_checkpoint(
    kafka, names, job, enrichment_service
):
    enrichment_service.configure(latency_ms=100)
    crashed = RunningJob(*job)

    def open_transaction() -> bool:
        lso = end_offsets(kafka, names("out"), "read_committed")
        return any(lso[p] < end for p, end in end_offsets(kafka, names("out")).items())

    deadline = time.monotonic() + 120
    try:
        # Killed while a transaction holds records: a quarter committed, and more written
        # but not yet committed (between two checkpoints there may be none for a moment).
        # Seen open, the transaction could still commit before the kill (the checkpoint
        # completing in between, the next one with nothing written yet), so the
        # run is frozen first and killed only if a transaction is still open then.
        while True:
            wait_until(
                lambda: (
                    progress(kafka, names) >= N // 4
                    and every_partition_started(kafka, names)
                    and open_transaction()
                ),
                max(deadline - time.monotonic(), 1),
                "a quarter of the input from every partition, and an open transaction",
            )
            # Frozen: no commit can begin now.
            signal_all(list(process_tree(crashed.proc.pid)), signal.SIGSTOP)
            if open_transaction() and open_transaction():  # an EndTxn sent before has landed
                break
            signal_all(list(process_tree(crashed.proc.pid)), signal.SIGCONT)
    finally:
        # A machine-level crash: SIGKILL to the CLI, its JVM, its Python workers, its reaper.
        kill_tree(crashed.proc.pid)
    killed_at = progress(kafka, names)
    assert killed_at < N
    # The killed job's open transaction holds the output's last stable offset back, and
    # Kafka's transactions tool shows it, until a job with the same prefix takes over.
    lso, hwm = end_offsets(kafka, names("out"), "read_committed"), end_offsets(kafka, names("out"))
    assert any(lso[p] < hwm[p] for p in hwm), (lso, hwm)
    listing = run_cli("kafka", "transactions", "--bootstrap-server", kafka, "list").stdout
    assert re.search(rf"{names('tx')}-\S+\s+\d+\s+\d+\s+Ongoing", listing), listing
    enrichment_service.configure(latency_ms=5)
    resumed = resume_until_complete(kafka, names, *job, "--from-checkpoint", "latest")
    path = re.search(r"resuming from (file://\S+/chk-(\d+))", resumed.output)
    assert path, resumed.output
    # (Flink reports any restore through a path as `is_savepoint`, a retained checkpoint's
    # too: the id and the path say which it was.)
    assert resumed.restored["id"] == int(path.group(2)), resumed.restored
    assert local_path(resumed.restored["external_path"]) == local_path(path.group(1))
    assert_exactly_once(kafka, names("out"), f"mini-cluster SIGKILL at {killed_at}", names("dlq"))


@pytest.mark.cluster
def test_killed_taskmanager_is_recovered_on_the_standalone_cluster(
    kafka, names, job, enrichment_service, flink_cluster
):
    enrichment_service.configure(latency_ms=100)
    submitted = run_cli(
        "submit", *job, "--detached", "--set", "restart.attempts=20", "--set", "restart.delay=2s"
    )
    job_id = re.search(r"JobID ([0-9a-f]{32})", submitted.stdout).group(1)
    try:
        wait_until(lambda: progress(kafka, names) >= N // 4, 120, "a quarter of the input")
        pids = flink_cluster.taskmanager_pids()
        assert pids, "no TaskManager process found"
        # A TaskManager's container dying: the JVM and the Python workers it started.
        doomed = set().union(*(descendants(pid) for pid in pids))
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # gone with its parent already
                pass
        killed_at = progress(kafka, names)
        enrichment_service.configure(latency_ms=5)
        flink_cluster.start_taskmanager()
        wait_until(
            lambda: (flink_cluster.job(job_id) or {}).get("state") == "FINISHED",
            240,
            "the job to finish after the TaskManager came back",
            every=2,
        )
    finally:
        state = (flink_cluster.job(job_id) or {}).get("state")
        if state not in (None, "FINISHED", "CANCELED", "FAILED"):
            subprocess.run([*CLI, "cluster", "status"], cwd=ROOT)
            run_cli("jobs", "cancel", job_id, "--jobmanager", flink_cluster.url[7:], check=False)
        if not flink_cluster.taskmanager_pids():  # the next tests need one
            flink_cluster.start_taskmanager()
    # The kill landed mid-stream, and Flink counted it: the lost TaskManager is in the
    # job's exception history (each entry a failure that restarted the job).
    assert killed_at < N
    import urllib.request

    with urllib.request.urlopen(f"{flink_cluster.url}/jobs/{job_id}/exceptions", timeout=10) as r:
        entries = (json.load(r).get("exceptionHistory") or {}).get("entries") or []
    assert entries, "Flink reports no failure after the TaskManager was killed"
    assert_exactly_once(kafka, names("out"), f"TaskManager SIGKILL at {killed_at}", names("dlq"))


def test_broker_restart_mid_stream(kafka, session_broker, names, job, enrichment_service):
    """The session broker stopped and started under a running job: the jar-run broker's
    process, or the container (`docker stop` / `docker start`, its data kept)."""
    enrichment_service.configure(latency_ms=60)
    running = RunningJob(*job, "--set", "restart.attempts=30", "--set", "restart.delay=2s")
    try:
        wait_until(lambda: progress(kafka, names) >= N // 4, 120, "a quarter of the input")
        session_broker.stop()
        stopped_at = progress_or_none(kafka, names)
        assert stopped_at is None, "the broker still answers after it was stopped"
        time.sleep(5)
        session_broker.start()
        assert progress(kafka, names) < N, "the job had finished before the broker stopped"
        assert running.wait(timeout=300) == 0, running.output
    finally:
        running.kill()
    assert_exactly_once(kafka, names("out"), "broker restart", names("dlq"))


@pytest.mark.parametrize("policy", ["retry", "dead-letter", "mark-missing", "fail"])
def test_enrichment_outage_under_each_policy(kafka, names, job, enrichment_service, policy):
    settings = {
        # retries span the 3 s outage: 200+400+800+1600+3200 ms of backoff
        "retry": [
            "--set",
            "enrichment.retries=5",
            "--set",
            "enrichment.backoff=200ms",
            "--set",
            "enrichment.timeout=500ms",
        ],
        "dead-letter": [
            "--set",
            "enrichment.retries=1",
            "--set",
            "enrichment.backoff=50ms",
            "--set",
            "enrichment.on_failure=dead-letter",
        ],
        "mark-missing": [
            "--set",
            "enrichment.retries=1",
            "--set",
            "enrichment.backoff=50ms",
            "--set",
            "enrichment.on_failure=mark-missing",
        ],
        "fail": [
            "--set",
            "enrichment.retries=1",
            "--set",
            "enrichment.backoff=50ms",
            "--set",
            "enrichment.on_failure=fail",
            "--set",
            "restart.attempts=20",
            "--set",
            "restart.delay=2s",
        ],
    }[policy]
    enrichment_service.configure(latency_ms=40)
    running = RunningJob(*job, *settings)
    try:
        wait_until(lambda: progress(kafka, names) >= N // 5, 120, "a fifth of the input")
        failed_before = enrichment_service.stats()["failures"]
        enrichment_service.configure(down=True)
        at = progress(kafka, names)
        time.sleep(3)
        enrichment_service.configure(down=False, latency_ms=5)
        failed_during = enrichment_service.stats()["failures"] - failed_before
        assert running.wait(timeout=300) == 0, running.output
    finally:
        running.kill()
    # The outage landed while records were in flight: the input was not all committed when
    # it began, and the service refused requests during it.
    print(f"[outage, {policy}] {at} of {N} committed at its start, {failed_during} refused")
    assert failed_during > 0, "no request reached the service during the outage"
    assert at < N, "the job had committed everything before the outage began"
    if policy == "fail":
        # Flink counted the failures the policy raised, and restarted the job each time.
        assert re.search(r"failure #1 in .*EnrichmentFailed", running.output), running.output
    if policy == "dead-letter":
        assert_out_and_dead_letters_exactly_once(kafka, names, enrichment_service)
        return
    records = assert_exactly_once(kafka, names("out"), f"outage, {policy}", names("dlq"))
    missing = [r for r in records if r["enrichment"] is None]
    if policy == "mark-missing":
        assert missing, "the outage should have left records marked missing"
        assert {r["enrichment_error"] for r in missing} == {
            f"HTTP 503 from {enrichment_service.url}/lookup/batch (2 attempts)"
        }
    else:
        # retry: the retries outlast the outage; fail: failed, restarted, re-enriched.
        assert missing == []
    if policy == "fail":
        assert "job enrich finished" in running.output
