"""Stopping is bounded and total: every signal, every phase, however the CLI was started.

Each test lists the run's process tree (the CLI, the mini-cluster JVM, Flink's Python
workers, the reaper) while it runs, stops it one way, and then demands that every one of
those processes is gone. The CLI is started with SIGINT inherited as ignored where that
is what a script or CI runner would do.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce
from tests.integration.helpers import RunningJob
from tests.support import kill_tree, topic_args, wait_gone, wait_until

pytestmark = pytest.mark.integration

STOP_LIMIT_S = 30
TEMP_DIR = re.compile(r"-Djava\.io\.tmpdir=(\S+)")


@pytest.fixture
def passthrough(kafka, names, tmp_path):
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(500))
    # Validating, so that the run has a Python stage (a plain copy stays in the JVM); in
    # process mode, Python workers: these tests pin the mode where they look for one.
    return [
        "passthrough",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "parse.validate_records=true",
        "--set",
        f"checkpoint.storage=file://{tmp_path}/checkpoints",
        "--set",
        "checkpoint.interval=1s",
    ]


def _kinds(tree: dict) -> set[str]:
    kinds = set()
    for _, cmd in tree.values():
        if cmd.startswith("java ") or "/java " in cmd:
            kinds.add("jvm")
        if "pyflink-udf-runner" in cmd or "beam_boot" in cmd:
            kinds.add("python-worker")
        if "pipelines.running.processes" in cmd:
            kinds.add("reaper")
    return kinds


def _timed_stop(job: RunningJob, signum: int) -> tuple[int, float]:
    started = time.monotonic()
    job.signal(signum)
    code = job.wait(timeout=STOP_LIMIT_S + 30)
    return code, time.monotonic() - started


def _jvm_temp_dirs(tree: dict) -> set[Path]:
    """The temp dirs the run's JVMs were given (their working directories, blob stores and
    extracted RPC jars: left in /tmp by every ended JVM before the owner took them)."""
    return {Path(m) for _, cmd in tree.values() for m in TEMP_DIR.findall(cmd)}


def _assert_nothing_left(tree: dict, output: str, crashed: bool = False) -> None:
    """No process left, and (unless everything was killed at once, a crash nothing of
    ours outlives: the next run sweeps it) no JVM temp dir."""
    left = wait_gone(tree, 15)
    assert not left, f"still running after the CLI exited: {left}\n{output[-3000:]}"
    if crashed:
        return
    temp_dirs = _jvm_temp_dirs(tree)
    assert temp_dirs, f"no JVM with its own temp dir in {tree}"
    wait_until(lambda: not any(d.exists() for d in temp_dirs), 15, f"{temp_dirs} to be removed")


@pytest.mark.parametrize(
    "signum, sigint_ignored, mode",
    [
        # Ctrl-C reaching a CLI that a script started in the background
        (signal.SIGINT, True, "process"),
        (signal.SIGTERM, False, "process"),  # Kubernetes, systemd, `timeout`, CI runners
        # The stage inside the JVM (pemja): no worker process, the same stop.
        (signal.SIGTERM, False, "thread"),
    ],
)
def test_signal_cancels_the_running_job_names_its_checkpoint_and_leaves_nothing(
    passthrough, signum, sigint_ignored, mode
):
    job = RunningJob(*passthrough, "--set", f"python.execution_mode={mode}",
                     sigint_ignored=sigint_ignored)  # fmt: skip
    job.wait_for(r"checkpoints [1-9]\d* completed", 120)
    tree = job.tree()
    kinds = _kinds(tree)
    assert {"jvm", "reaper"} <= kinds, tree
    assert ("python-worker" in kinds) == (mode == "process"), tree
    code, took = _timed_stop(job, signum)
    name = signal.Signals(signum).name
    assert code == 0, job.output
    assert took < STOP_LIMIT_S, f"{name} took {took:.1f} s\n{job.output}"
    assert f"stopping ({name}): cancelling the job" in job.output
    assert re.search(
        r"last retained checkpoint: file://\S+/chk-\d+ \(resume with "
        r"--from-checkpoint latest\)",
        job.output,
    ), job.output
    assert "job passthrough canceled" in job.output
    _assert_nothing_left(tree, job.output)


@pytest.mark.parametrize("phase", ["building", "starting"])
def test_sigterm_before_the_job_runs_ends_within_the_limit(passthrough, phase):
    job = RunningJob(*passthrough)
    if phase == "building":  # the gateway JVM is up, the job not yet submitted
        deadline = time.monotonic() + 120
        while "jvm" not in _kinds(job.tree()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "submitted" not in job.output, "too late to test the building phase"
    else:  # submitted: tasks are being deployed and started
        job.wait_for(r"submitted to the local mini-cluster", 120)
    tree = job.tree()
    assert "jvm" in _kinds(tree), tree
    code, took = _timed_stop(job, signal.SIGTERM)
    assert took < STOP_LIMIT_S, f"SIGTERM while {phase} took {took:.1f} s\n{job.output}"
    assert "stopping (SIGTERM)" in job.output, job.output
    assert code == 0, job.output
    _assert_nothing_left(tree, job.output)


def test_sigkill_of_the_cli_leaves_no_jvm_or_worker(passthrough):
    job = RunningJob(*passthrough, "--set", "python.execution_mode=process")
    job.wait_for(r"records in [1-9]", 120)
    tree = job.tree()
    assert {"jvm", "python-worker"} <= _kinds(tree), tree
    job.proc.kill()  # the CLI alone: no handler of ours runs
    job.wait(timeout=10)
    cli = {job.proc.pid}
    rest = {pid: entry for pid, entry in tree.items() if pid not in cli}
    _assert_nothing_left(rest, job.output)


@pytest.fixture
def stuck_enrichment(kafka, names, enrichment_service, tmp_path):
    """The enrich job with lookups that hang for a minute: no barrier can pass the async
    stage, so neither a checkpoint nor a savepoint can complete."""
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    # At most capacity / latency = 5 / 5 ms = 1,000 records/s: far from done when the
    # service hangs, on any machine.
    produce(kafka, names("in"), demo_values(50_000))
    enrichment_service.configure(latency_ms=5)
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
        "enrichment.capacity=5",
        "--set",
        "enrichment.max_capacity=5",
        "--set",
        "enrichment.timeout=2min",
        "--set",
        "enrichment.retries=0",
        "--savepoint-on-stop",
    ]

    def start() -> RunningJob:
        job = RunningJob(*args)
        job.wait_for(r"checkpoints [1-9]\d* completed", 120)
        enrichment_service.configure(latency_ms=60_000)
        time.sleep(3)  # lookups now in flight against the hung service
        return job

    return start


def test_savepoint_that_cannot_finish_is_reported_and_the_job_cancelled(stuck_enrichment):
    job = stuck_enrichment()
    tree = job.tree()
    code, took = _timed_stop(job, signal.SIGTERM)
    assert took < STOP_LIMIT_S, f"took {took:.1f} s\n{job.output}"
    assert code == 0, job.output
    assert (
        "savepoint failed: it did not complete in time; cancelling the job instead" in job.output
    ), job.output
    assert re.search(r"last retained checkpoint: file://\S+/chk-\d+", job.output), job.output
    assert "job enrich canceled" in job.output
    _assert_nothing_left(tree, job.output)


def test_second_ctrl_c_exits_at_once(stuck_enrichment):
    job = stuck_enrichment()
    tree = job.tree()
    job.signal(signal.SIGINT)
    job.wait_for(r"taking a savepoint", 30)
    time.sleep(1)
    second = time.monotonic()
    job.signal(signal.SIGINT)
    code = job.wait(timeout=30)
    took = time.monotonic() - second
    assert took < 5, f"the second Ctrl-C took {took:.1f} s\n{job.output}"
    assert code == 130
    assert "SIGINT again: exiting now" in job.output
    _assert_nothing_left(tree, job.output)


def test_harness_kill_tree_ends_a_run_whatever_it_is_doing(passthrough):
    """The harness's own backstop (used when a test fails or times out) ends everything."""
    job = RunningJob(*passthrough)
    job.wait_for(r"records in [1-9]", 120)
    tree = job.tree()
    kill_tree(job.proc.pid)
    _assert_nothing_left(tree, job.output, crashed=True)


@pytest.mark.parametrize("ending", ["finished", "failed"])
def test_a_run_that_ends_by_itself_leaves_nothing(kafka, names, tmp_path, ending):
    """Normal end (a bounded job) and failure (group offsets with fallback `fail` and no
    committed offset: the source fails, the job with it)."""
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(300))
    args = [
        "passthrough",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "parse.validate_records=true",
        "--set",
        "source.bounded=true",
        "--set",
        f"checkpoint.storage=file://{tmp_path}/checkpoints",
    ]
    if ending == "failed":
        args += [
            "--set",
            "source.start.mode=group-offsets",
            "--set",
            "source.start.fallback=fail",
            "--set",
            "restart.strategy=none",
        ]
    job = RunningJob(*args)
    job.wait_for(r"submitted to the local mini-cluster", 120)
    tree = job.tree()
    deadline = time.monotonic() + 20
    while (
        "python-worker" not in _kinds(tree)
        and job.proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
        # New processes only: a process that has ended by now reads as a zombie with no
        # command line, and would hide the JVM it was (a job that fails fast).
        for pid, entry in job.tree().items():
            tree.setdefault(pid, entry)
    assert "jvm" in _kinds(tree), tree
    code = job.wait(timeout=180)
    if ending == "finished":
        assert code == 0 and "job passthrough finished" in job.output, job.output
    else:
        assert code == 2 and "error: job passthrough failed:" in job.output, job.output
    _assert_nothing_left(tree, job.output)
