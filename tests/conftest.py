"""Shared fixtures: a real Kafka broker for the session, unique names per test."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "pipelines.cli"]


def _docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def kafka() -> str:
    """Bootstrap servers of a real broker: the jar-run local one, or testcontainers'
    when PIPELINES_TEST_DOCKER=1 and a Docker engine answers."""
    if os.environ.get("PIPELINES_TEST_DOCKER") == "1" and _docker_answers():
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_kraft()
        container.start()
        yield container.get_bootstrap_server()
        container.stop()
        return
    from pipelines.devtools.kafka_broker import Broker

    broker = Broker()
    if not broker.ready():  # reuse any broker already answering there (e.g. another checkout's)
        broker.up(log=lambda *_: None)
    yield broker.bootstrap


@pytest.fixture
def names(request):
    """Unique topic, group and transactional-id names for one test."""
    tag = f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"

    def make(kind: str) -> str:
        return f"t-{tag}-{kind}"

    return make


def topic_args(kafka: str, names, *, out: str = "out", tx_suffix: str = "",
               dead_letters: bool = False, late: bool = False) -> list[str]:
    """The `--set` arguments that point a job at this test's broker, topics, group and
    transactional id prefix (each named by the `names` fixture: in, out, group, tx, dlq, late)."""
    sets = [f"kafka.bootstrap_servers={kafka}",
            f"source.topics=[{names('in')}]",
            f"source.group_id={names('group')}",
            f"sink.topic={names(out)}",
            f"sink.transactional_id_prefix={names('tx')}{tx_suffix}"]
    if dead_letters:
        sets.append(f"sink.dead_letter_topic={names('dlq')}")
    if late:
        sets.append(f"window.late_topic={names('late')}")
    return [arg for item in sets for arg in ("--set", item)]


def job_env(extra: dict | None = None) -> dict:
    """The environment for job processes: this checkout's `pipelines` first on the path,
    for the CLI and for the Python workers Flink starts from it."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}:{path}" if path else str(ROOT), **(extra or {})}


def run_cli(*args: str, timeout: float = 300, env: dict | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    """Run `pipelines ...` as a user would, in a subprocess of its own."""
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=job_env(env))
    if check and proc.returncode != 0:
        raise AssertionError(f"pipelines {' '.join(args)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="session")
def flink_cluster(kafka):
    """The local standalone cluster, started from the PyFlink wheel's bin/start-cluster.sh."""
    from pipelines.devtools.flink_cluster import Cluster

    cluster = Cluster()
    was_up = cluster.overview() is not None
    cluster.up(log=lambda *_: None)
    yield cluster
    if not was_up:
        cluster.down(log=lambda *_: None)


@pytest.fixture
def enrichment_service():
    """A real enrichment HTTP service on a free port, for one test."""
    from pipelines.devtools.enrichment_service import Service
    from pipelines.devtools.ports import free_ports

    service = Service(port=free_ports())
    service.up(latency_ms=5, log=lambda *_: None)
    yield service
    service.down(log=lambda *_: None)
