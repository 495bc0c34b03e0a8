"""Operating a job on the standalone cluster through `pipelines-dev submit` and `pipelines jobs`:
re-packaging never touches state, one running copy per job, no silent loss on restore.

Every job here reads from `earliest`: a restore that did nothing would re-read the whole
input and duplicate it, so exact output proves the restore as well as the copy."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from pipelines.flink.jobmanager import JobManager
from pipelines.host.paths import local_state
from pipelines_dev.demo import demo_record
from pipelines_dev.topics import create_topics, end_offsets, produce, read_all
from tests.integration.helpers import RunningJob
from tests.support import (
    CLI,
    Started,
    committed_count,
    restored_state_only,
    run_cli,
    topic_args,
    wait_until,
)

N = 2000


def _values(start: int, count: int) -> list[bytes]:
    return [
        json.dumps(demo_record(i, 1_700_000_000_000 + i)).encode()
        for i in range(start, start + count)
    ]


def _completed_checkpoints(jm: JobManager, job_id: str) -> int:
    return jm._call(f"/jobs/{job_id}/checkpoints")["counts"]["completed"]


@pytest.fixture
def operated(kafka, names, tmp_path, flink_cluster):
    """Topics with N records; the passthrough job's arguments with the default state dirs
    (checkpoint.storage unset) rooted in this test's PIPELINES_STATE_DIR; cancels what the
    test left running on the cluster."""
    create_topics(kafka, {names("in"): 3, names("out"): 3})
    produce(kafka, names("in"), _values(0, N))
    args = [
        "passthrough",
        *topic_args(kafka, names),
        "--set",
        "source.start.mode=earliest",
        "--set",
        "checkpoint.interval=1s",
    ]
    env = {"PIPELINES_STATE_DIR": str(tmp_path / "state")}
    jm = JobManager(flink_cluster.url.removeprefix("http://"))
    yield args, env, jm, tmp_path / "state"
    for job in jm.running_copies(names("tx")):
        jm.cancel(job.id)


@pytest.mark.cluster
def test_resubmit_is_refused_and_a_repackaged_job_restores_latest_exactly_once(
    kafka, names, operated
):
    args, env, jm, state = operated
    # An attached submit prints the job id at once; Ctrl-C leaves the job running, says so.
    first = Started([*CLI, "submit", *args], env=env)
    job_id = wait_until(
        lambda: re.search(r"submitted to \S+ as ([0-9a-f]{32})", first.output), 120, "the job id"
    ).group(1)
    wait_until(lambda: committed_count(kafka, names("out")) >= N, 120, "the first N records")
    wait_until(lambda: _completed_checkpoints(jm, job_id) >= 2, 60, "checkpoints of the first copy")
    first.proc.send_signal(signal.SIGINT)
    assert first.wait(60) == 130, first.output
    assert (
        f"job {job_id} keeps running at {jm.url}. Stop it with: pipelines jobs stop {job_id}"
        in first.output
    ), first.output
    assert {j.id: j.state for j in jm.jobs()}[job_id] == "RUNNING"

    # A second copy is refused before anything is packaged or submitted.
    second = run_cli("submit", *args, "--detached", env=env, check=False)
    assert second.returncode == 2, second.stdout + second.stderr
    assert (
        f"is RUNNING at {jm.url} with the same sink.transactional_id_prefix '{names('tx')}'"
        in second.stderr
    )
    assert f"Stop it first: pipelines jobs stop {job_id}" in second.stderr
    assert [j.id for j in jm.running_copies(names("tx"))] == [job_id]

    # Its checkpoints are under the state dir, not in the package a later submit replaces.
    checkpoints = sorted((state / "checkpoints" / "passthrough" / job_id).glob("chk-*/_metadata"))
    assert checkpoints, f"no checkpoint under {state}"
    assert not list(local_state("packages").glob("passthrough-*/.local"))

    listed = run_cli("jobs", "--jobmanager", jm.address).stdout
    assert re.search(rf"{job_id}\s+RUNNING .* prefix {names('tx')}", listed), listed
    cancelled = run_cli("jobs", "cancel", job_id, "--jobmanager", jm.address).stdout
    assert f"({job_id}) canceled" in cancelled
    # The retained checkpoint, read once the job is cancelled (Flink keeps the newest only).
    [kept] = [
        m.parent for m in (state / "checkpoints" / "passthrough" / job_id).glob("chk-*/_metadata")
    ]
    produce(kafka, names("in"), _values(N, N))

    # Re-package and restore from `latest`, attached, stopping with a savepoint on Ctrl-C.
    # It can read only from the restored checkpoint (tests.support.restored_state_only).
    fresh_group = restored_state_only(names)
    resumed = Started(
        [*CLI, "submit", *args, *fresh_group, "--from-checkpoint", "latest", "--stop-on-exit"],
        env=env,
    )
    resumed_id = wait_until(
        lambda: re.search(r"submitted to \S+ as ([0-9a-f]{32})", resumed.output), 120, "its id"
    ).group(1)
    path = re.search(
        rf"resuming from file://{state}/checkpoints/passthrough/{job_id}/chk-(\d+)", resumed.output
    )
    assert path, resumed.output
    restored = wait_until(
        lambda: (jm._call(f"/jobs/{resumed_id}/checkpoints").get("latest") or {}).get("restored"),
        60,
        "Flink's report of the restore",
    )
    assert restored["id"] == int(path.group(1)), restored
    assert restored["external_path"].endswith(f"/{job_id}/chk-{path.group(1)}"), restored
    assert (kept / "_metadata").is_file(), "re-packaging removed the earlier job's checkpoint"
    wait_until(lambda: committed_count(kafka, names("out")) >= 2 * N, 120, "all 2N records")
    resumed.proc.send_signal(signal.SIGINT)
    assert resumed.wait(150) == 0, resumed.output
    savepoint = re.search(r"savepoint written to (\S+)", resumed.output).group(1)
    assert savepoint.startswith(f"file:{state}/savepoints/passthrough/"), savepoint
    assert {j.id: j.state for j in jm.jobs()}[resumed_id] == "FINISHED"

    out = read_all(kafka, names("out"))
    assert sorted(out) == sorted(_values(0, 2 * N)), (
        f"{len(out)} records read, {len(set(out))} distinct; expected {2 * N}"
    )
    assert end_offsets(kafka, names("out"), "read_committed") == end_offsets(kafka, names("out"))


@pytest.mark.cluster
def test_restore_older_than_the_transaction_timeout_is_refused_with_the_arithmetic(
    kafka, names, operated
):
    args, env, jm, state = operated
    args += ["--set", "sink.transaction_timeout=15s", "--set", "checkpoint.timeout=10s"]
    submitted = run_cli("submit", *args, "--detached", env=env)
    job_id = re.search(r"as ([0-9a-f]{32})", submitted.stdout).group(1)
    wait_until(lambda: _completed_checkpoints(jm, job_id) >= 1, 120, "a checkpoint")
    # Stopped with a savepoint by `pipelines jobs stop`, into the job's own savepoint dir.
    stopped = run_cli("jobs", "stop", names("tx"), "--jobmanager", jm.address).stdout
    location = re.search(r"savepoint written to file:(\S+)", stopped).group(1)
    assert f"job passthrough ({job_id}) stopped" in stopped
    assert location.startswith(f"{state}/savepoints/passthrough/savepoint-")
    assert (
        f"resume with: pipelines-dev submit passthrough --from-checkpoint file:{location}"
        in stopped
    )
    assert {j.id: j.state for j in jm.jobs()}[job_id] == "FINISHED"
    newest = Path(location) / "_metadata"
    assert newest.is_file()
    # Old enough: its age plus one checkpoint interval reaches the 15 s transaction timeout.
    wait_until(lambda: time.time() - newest.stat().st_mtime + 1 >= 15, 60, "the checkpoint to age")
    before = {j.id for j in jm.jobs()}
    refused = run_cli(
        "submit", *args, "--detached", "--from-checkpoint", "latest", env=env, check=False
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert re.fullmatch(
        rf"error: --from-checkpoint {newest.parent.as_uri()}: written \d+ s ago; its sink "
        r"transactions began up to checkpoint.interval \(1 s\) before it, so \d+ s >= "
        r"sink.transaction_timeout \(15 s\): the broker has aborted them, and the records they "
        r"held \(up to one checkpoint interval of output per sink subtask\) would be lost "
        r"without an error. Restore anyway with --accept-transaction-loss, or re-read the "
        r"input from offsets \(source.start\) into a fresh output\n",
        refused.stderr,
    ), refused.stderr
    assert {j.id for j in jm.jobs()} == before, "a refused restore submitted a job"

    accepted = run_cli(
        "submit",
        *args,
        "--detached",
        "--from-checkpoint",
        "latest",
        "--accept-transaction-loss",
        env=env,
    )
    said = accepted.stdout + accepted.stderr
    assert re.search(
        r"warning: --accept-transaction-loss: .*sink.transaction_timeout \(15 s\)", said
    ), said
    assert re.search(r"submitted \(detached\) as [0-9a-f]{32}", accepted.stdout + accepted.stderr)


@pytest.mark.integration
def test_a_second_local_run_of_a_running_job_is_refused(kafka, names, tmp_path):
    args = [
        "passthrough",
        *topic_args(kafka, names),
        "--set",
        f"checkpoint.storage=file://{tmp_path}/checkpoints",
    ]
    create_topics(kafka, {names("in"): 1, names("out"): 1})
    running = RunningJob(*args)
    try:
        match = running.wait_for(r"as ([0-9a-f]{32}) \(REST/UI at http://([0-9.:]+)\)", 120)
        second = run_cli("run", *args, check=False)
        assert second.returncode == 2, second.stdout + second.stderr
        assert (
            f"error: job passthrough: passthrough ({match.group(1)}) is RUNNING at "
            f"http://{match.group(2)} with the same sink.transactional_id_prefix '{names('tx')}'"
            in second.stderr
        ), second.stderr
    finally:
        assert running.interrupt() == 0, running.output
    assert not list(Path(local_state("runs")).glob("*.json")), "the run's registration stayed"
