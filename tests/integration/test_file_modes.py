"""Files a run writes are this user's alone: `.local/` is 0700, and what a job leaves there
(checkpoints, the worker log that can hold records, the JVM log, the failure traces) is
0600 in 0700 directories: the CLI runs with umask 077, which its JVMs and workers inherit."""

from __future__ import annotations

import stat

import pytest

from pipelines.host.paths import LOCAL_DIR, local_state
from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce
from tests.integration.helpers import RunningJob
from tests.support import topic_args

pytestmark = pytest.mark.integration


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_what_a_run_writes_is_private(kafka, names):
    create_topics(kafka, {names("in"): 1, names("out"): 1, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(200, bad_every=20))
    job = RunningJob(
        "passthrough",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "checkpoint.interval=500ms",
        "--set",
        "parse.validate_records=true",
    )
    try:
        job_id = job.wait_for(r"as ([0-9a-f]{32})", 120).group(1)
        job.wait_for(r"checkpoints [1-9]\d* completed", 120)
    finally:
        assert job.interrupt() == 0, job.output  # cancelled: its checkpoint is retained
    assert _mode(LOCAL_DIR) == 0o700
    written = [
        local_state("logs", "passthrough-jvm.log"),
        local_state("checkpoints", "passthrough", job_id),
    ]
    checked = 0
    for root in written:
        assert root.exists(), root
        for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
            if path.is_symlink():
                continue
            expected = 0o700 if path.is_dir() else 0o600
            assert _mode(path) == expected, f"{path}: {oct(_mode(path))}"
            checked += 1
    assert checked > 3


@pytest.mark.cluster
def test_the_standalone_clusters_files_are_private(flink_cluster):
    """Its daemons' logs (a job's records can be in them) and its state: the start scripts
    run with umask 077, whoever starts the cluster."""
    assert _mode(flink_cluster.state_dir) == 0o700
    assert _mode(flink_cluster.log_dir) == 0o700
    logs = [p for p in flink_cluster.log_dir.iterdir() if p.suffix in (".log", ".out")]
    assert any("standalonesession" in p.name for p in logs), logs
    for path in logs:
        assert _mode(path) == 0o600, f"{path}: {oct(_mode(path))}"
