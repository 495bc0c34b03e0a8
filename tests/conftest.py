"""Shared fixtures: a real Kafka broker for the session, unique names per test."""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from pipelines.flink_compat import disconnect_gateway, gateway_in_group
from pipelines.processes import ProcessGroups
from tests.support import (
    become_subreaper,
    end_all_started,
    kill_tree,
    orphaned_flink_processes,
)

become_subreaper()

# Unit tests start PyFlink's gateway JVM in this process: own it like a run does.
_SESSION_GROUPS = ProcessGroups()
_OWNED_GATEWAY = gateway_in_group(_SESSION_GROUPS)
_OWNED_GATEWAY.__enter__()


def pytest_sessionfinish(session, exitstatus):
    _OWNED_GATEWAY.__exit__(None, None, None)
    disconnect_gateway()
    _SESSION_GROUPS.end()
    orphans = orphaned_flink_processes()
    if orphans:
        for pid in orphans:
            kill_tree(pid)
        print(
            "\n[harness] Flink processes of this checkout outlived their parents "
            "(ended now; a leak to fix):\n  " + "\n  ".join(orphans.values())
        )
        session.exitstatus = 1


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
        broker.up()
    yield broker.bootstrap


@pytest.fixture
def names(request):
    """Unique topic, group and transactional-id names for one test."""
    tag = f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"

    def make(kind: str) -> str:
        return f"t-{tag}-{kind}"

    return make


@pytest.fixture(autouse=True)
def _end_what_the_test_started():
    """Whatever a test started and left running (it failed, timed out, or forgot) is ended
    with its whole process tree before the next test starts."""
    yield
    left = end_all_started()
    if left:
        print(f"\n[harness] ended processes a test left running: {', '.join(left)}")


@pytest.fixture(scope="session")
def flink_cluster(kafka):
    """The local standalone cluster, started from the PyFlink wheel's bin/start-cluster.sh."""
    from pipelines.devtools.flink_cluster import Cluster

    cluster = Cluster()
    was_up = cluster.overview() is not None
    cluster.up()
    yield cluster
    if not was_up:
        cluster.down()


@pytest.fixture
def enrichment_service():
    """A real enrichment HTTP service on a free port, for one test."""
    from pipelines.devtools.enrichment_service import Service
    from pipelines.devtools.ports import free_ports

    service = Service(port=free_ports())
    service.up(latency_ms=5)
    yield service
    service.down()
