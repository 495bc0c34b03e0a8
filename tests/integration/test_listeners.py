"""No port a run opens is reachable from another host: the listening sockets of each run's
process tree, read from /proc while it runs, are all on loopback. Before the loopback shim
(pipelines/running/loopback.py) a local run with a Python stage held 8 wildcard listeners in its
JVM and PyFlink's worker pool on [::] in the CLI process."""

from __future__ import annotations

import re
import time

import pytest

from pipelines.running.processes import descendants, proc_stats
from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce
from tests.integration.helpers import RunningJob
from tests.support import listening_sockets, not_loopback, run_cli, topic_args

pytestmark = pytest.mark.integration


def _python_stage_args(kafka, names):
    return [
        "passthrough",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "parse.validate_records=true",  # parse in Python: the worker and its gRPC services
        "--set",
        "checkpoint.interval=1s",
    ]


def _audit(pids: set[int], what: str) -> dict[str, int]:
    listeners = listening_sockets(pids)
    print(f"[{what}] {len(listeners)} listeners: {sorted(listeners)}")
    assert listeners, f"{what}: no listener found: the audit would prove nothing"
    assert not_loopback(listeners) == {}
    return listeners


def test_a_local_run_with_python_stages_listens_on_loopback_only(kafka, names):
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(500, bad_every=50))
    job = RunningJob(*_python_stage_args(kafka, names))
    try:
        job.wait_for(r"checkpoints [1-9]\d* completed", 120)  # the Python worker is up
        listeners = _audit(descendants(job.proc.pid), "local run")
        assert len(listeners) >= 8  # REST, RPC, blob, Beam's fn services, the worker pool
    finally:
        assert job.interrupt() == 0, job.output


@pytest.mark.cluster
def test_the_standalone_cluster_and_its_python_workers_listen_on_loopback_only(
    kafka, names, flink_cluster
):
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(500, bad_every=50))
    submitted = run_cli("submit", *_python_stage_args(kafka, names), "--detached")
    job_id = re.search(r"as ([0-9a-f]{32})", submitted.stdout).group(1)
    try:
        deadline_checks = 0
        while True:  # the Python workers start with the job's first tasks
            info = flink_cluster.job(job_id) or {}
            if info.get("state") == "RUNNING" and all(
                v.get("status") == "RUNNING" for v in info.get("vertices", [])
            ):
                break
            deadline_checks += 1
            assert deadline_checks < 240, info
            time.sleep(0.5)
        conf = str(flink_cluster.conf_dir).encode()
        daemons = set()
        for pid in proc_stats():
            try:
                if conf in open(f"/proc/{pid}/cmdline", "rb").read():
                    daemons.add(pid)
            except OSError:
                continue
        assert daemons, "no cluster daemon found"
        tree = set().union(*(descendants(pid) for pid in daemons))
        _audit(tree, "standalone cluster")
    finally:
        run_cli("jobs", "cancel", job_id, "--jobmanager", flink_cluster.url[7:], check=False)
