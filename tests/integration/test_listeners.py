"""No port a run opens is reachable from another host: the listening sockets of each run's
process tree, read from /proc while it runs, are all on loopback. Before the loopback shim
(pipelines/host/loopback.py) a local run with a Python stage held 8 wildcard listeners in its
JVM and PyFlink's worker pool on [::] in the CLI process."""

from __future__ import annotations

import os
import re
import time

import pytest

from pipelines.host.loopback import SHIM_SWITCH
from pipelines.running.processes import command_lines, descendants
from pipelines.settings.schema import LOCAL_REPORTER_PORTS
from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce
from tests.integration.helpers import RunningJob
from tests.support import cmdline, listening_sockets, not_loopback, run_cli, topic_args

pytestmark = pytest.mark.integration


def _python_stage_args(kafka, names, mode="process"):
    """Process mode where the Python worker's gRPC services are what is audited."""
    return [
        "passthrough",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        "parse.validate_records=true",  # parse in Python: the worker and its gRPC services
        "--set",
        "checkpoint.interval=1s",
        "--set",
        f"python.execution_mode={mode}",
    ]


def _audit(pids: set[int], what: str) -> dict[str, int]:
    listeners = listening_sockets(pids)
    print(f"[{what}] {len(listeners)} listeners: {sorted(listeners)}")
    assert listeners, f"{what}: no listener found: the audit would prove nothing"
    assert not_loopback(listeners) == {}
    return listeners


# The fewest listeners each mode opens: REST, RPC and blob server, then in process mode
# Beam's fn services and the worker pool (thread mode has no worker, no data plane).
FEWEST_LISTENERS = {"process": 8, "thread": 3}


@pytest.mark.parametrize("mode", sorted(FEWEST_LISTENERS))
def test_a_local_run_with_python_stages_listens_on_loopback_only(kafka, names, mode):
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(500, bad_every=50))
    job = RunningJob(*_python_stage_args(kafka, names, mode))
    try:
        job.wait_for(r"checkpoints [1-9]\d* completed", 120)  # the Python stage is up
        listeners = _audit(descendants(job.proc.pid), f"local run, {mode} mode")
        assert len(listeners) >= FEWEST_LISTENERS[mode]
    finally:
        assert job.interrupt() == 0, job.output


# What stays on the wildcard without the shim, with every Flink bind option set: upstream
# listeners that take no address (docs/security.md lists them with the same reasons).
BEAM_SERVICES_PER_WORKER = 6  # control, data, state, logging, artifact, provision


def test_with_the_shim_off_only_listeners_without_a_bind_option_are_on_the_wildcard(kafka, names):
    """Flink's own options put REST, RPC, blob and data servers on loopback; the wildcard
    holds exactly Flink's Prometheus reporter (`metrics.reporter.prom.port`, no host option)
    and flink-python's Beam services for each Python worker (its ServerFactory binds
    `NettyServerBuilder.forPort`), one of them the provision endpoint the worker is given."""
    create_topics(kafka, {names("in"): 2, names("out"): 2, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(200, bad_every=50))
    job = RunningJob(*_python_stage_args(kafka, names), env={**os.environ, SHIM_SWITCH: "off"})
    try:
        job.wait_for(r"checkpoints [1-9]\d* completed", 120)  # the Python worker is up
        tree = descendants(job.proc.pid)
        wildcard = not_loopback(listening_sockets(tree))
        workers = [pid for pid in tree if "beam_boot" in cmdline(pid)]
        provision = {
            m.group(1) for pid in workers
            for m in [re.search(r"--provision_endpoint=\S+:(\d+)", cmdline(pid))] if m
        }  # fmt: skip
        ports = {key.split("|")[1] for key in wildcard}
        first, last = LOCAL_REPORTER_PORTS
        reporter = {p for p in ports if first <= int(p) <= last}
        print(f"[shim off] on the wildcard: {sorted(wildcard)}; workers {len(workers)}")
        assert workers and provision and provision <= ports, (provision, ports)
        assert len(reporter) == 1, wildcard
        assert len(ports - reporter) == BEAM_SERVICES_PER_WORKER * len(workers), wildcard
        assert all(command.startswith("java ") for command in wildcard.values()), wildcard
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
        conf = str(flink_cluster.conf_dir)
        daemons = {pid for pid, cmd in command_lines().items() if conf in cmd}
        assert daemons, "no cluster daemon found"
        tree = set().union(*(descendants(pid) for pid in daemons))
        _audit(tree, "standalone cluster")
    finally:
        run_cli("jobs", "cancel", job_id, "--jobmanager", flink_cluster.url[7:], check=False)
