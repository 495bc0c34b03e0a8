"""Shared fixtures: a real Kafka broker for the session, unique names per test."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from pipelines.flink.gateway import disconnect_gateway, gateway_in_group
from pipelines.running.processes import ProcessGroups
from tests.support import (
    LIVE,
    become_subreaper,
    end_all_started,
    kill_tree,
    orphaned_flink_processes,
)

become_subreaper()

# Every JVM the tests start on the host (PyFlink's gateway and mini-cluster, `flink run`,
# the standalone clusters, Beam's Java side: all read JVM_ARGS; not the containers')
# compiles with C1 only. The suite's jobs move hundreds of records and end in seconds, so
# C2's compiles were CPU spent on code that never got hot: test_passthrough.py took
# 73-79 s with them and 53-60 s without (user CPU 32 -> 21-25 s), and on two cores the
# other worker's tests wait for that CPU. Behaviour is the same either way; benchmarks
# (bench/) never import this file and keep the default. A JVM_ARGS of your own (even
# empty) is left as it is.
os.environ.setdefault("JVM_ARGS", "-XX:TieredStopAtLevel=1")

# Each pytest-xdist worker takes free ports from a range of its own (pipelines_dev.ports):
# a port one worker found free and was about to bind could be found free by the other.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and "PIPELINES_PORT_RANGE" not in os.environ:
    from pipelines_dev.ports import share

    _COUNT = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["PIPELINES_PORT_RANGE"] = share(int(_WORKER[2:]), _COUNT)


def _terminated(signum, frame):
    """SIGTERM (a CI runner's stop, `timeout`) unwinds like Ctrl-C, so every fixture's
    teardown ends what it started: processes, and containers, which no process group holds."""
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _terminated)

# Unit tests start PyFlink's gateway JVM in this process: own it like a run does.
_SESSION_GROUPS = ProcessGroups()
_OWNED_GATEWAY = gateway_in_group(_SESSION_GROUPS)
_OWNED_GATEWAY.__enter__()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the last output of each process it started: CI keeps
    only the report, and a job's progress lines say what a bare timeout does not."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for started in LIVE:
            tail = "\n".join(started.output.splitlines()[-40:])
            report.sections.append((f"last output of {' '.join(started.args[3:5])}", tail))


# `make test` runs the suite as two pytest workers (pytest-xdist, `--dist loadgroup`): these
# modules on one, every other module on the other, so the long waits of the topology's
# faults, Beam's runners and the fresh copies overlap the rest. A module here must hold no
# fixed-port local service another test shares (the standalone cluster on 8081, the
# Prometheus on 9090): each worker has its own session broker, free ports, unique names.
BESIDE_THE_REST = frozenset(
    {
        "test_topology.py",
        "test_beam.py",
        "test_templates.py",
        "test_secure_kafka.py",
        "test_stopping.py",
        # With one core kept busy the topology, Beam, copies, secure broker and stopping take
        # ~2,450 s, the rest ~3,200 s; these three (~400 s) even it out.
        "test_start_modes.py",
        "test_record_metadata.py",
        "test_windowed_idleness.py",
        # These two (~75 s) even out the halves with the thread-mode stop case of
        # test_stopping.py (~40 s) on this side.
        "test_first_checkpoint.py",
        "test_composed_stages.py",
    }
)
SHARED_FIXED_PORT_FIXTURES = frozenset({"flink_cluster"})


def half_of(nodeid: str) -> str:
    """The worker's share a test belongs to: "beside" or "rest"."""
    return "beside" if Path(nodeid.split("::")[0]).name in BESIDE_THE_REST else "rest"


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` as the two halves above. xdist's own loadgroup reads
    `xdist_group` marks into each test's id, which pytest 9 no longer lets it change
    (measured: one module's tests went to both workers, two topologies ran at once)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TwoHalves(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return half_of(nodeid)

    return TwoHalves(config, log)


def pytest_itemcollected(item):
    shared = SHARED_FIXED_PORT_FIXTURES.intersection(item.fixturenames)
    if shared and half_of(item.nodeid) == "beside":
        raise pytest.UsageError(
            f"{item.nodeid} runs beside the rest (tests/conftest.py BESIDE_THE_REST) "
            f"but uses {', '.join(sorted(shared))}, a fixed-port service the other "
            "worker shares: move the module out of BESIDE_THE_REST"
        )


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


class SessionBroker:
    """The session's broker, whichever kind: tests that stop and start it use this."""

    def __init__(self, kind: str, bootstrap: str, stop, start, container=None):
        self.kind, self.bootstrap = kind, bootstrap
        self.stop, self.start = stop, start
        self.container = container  # the ContainerBroker when kind == "container"


def _not_here() -> None:
    raise RuntimeError(
        "PIPELINES_TEST_KAFKA: this session shares another's broker and cannot stop or start it"
    )


def _broker_mode() -> str:
    mode = os.environ.get("PIPELINES_TEST_BROKER", "auto")
    if mode not in ("auto", "container", "jar"):
        raise pytest.UsageError(f"PIPELINES_TEST_BROKER={mode}: use auto, container or jar")
    return mode


# Why the container tests cannot run here (None: they can); set by the session broker.
NO_CONTAINERS: list[str] = []


@pytest.fixture(scope="session")
def session_broker():
    """A real broker for the session: a Kafka container started through testcontainers from
    the project's own image where a Docker engine answers (PIPELINES_TEST_BROKER=container
    insists on it, =jar never tries), else the jar-run local broker; or the broker at
    PIPELINES_TEST_KAFKA, which a test running a fresh copy's tests hands to them."""
    shared = os.environ.get("PIPELINES_TEST_KAFKA")
    if shared:  # a test session inside another's (a fresh copy's tests): its broker, shared
        yield SessionBroker("shared", shared, _not_here, _not_here)
        return
    mode = _broker_mode()
    reason = None
    if mode != "jar":
        from pipelines_dev.containers import DockerError, docker_problem, ensure_kafka_image

        reason = docker_problem()
        if reason is None:
            try:
                ensure_kafka_image()
            except DockerError as exc:
                reason = str(exc)
        if reason and mode == "container":
            pytest.exit(f"PIPELINES_TEST_BROKER=container, but {reason}", returncode=3)
    else:
        reason = "PIPELINES_TEST_BROKER=jar"
    if reason is None:
        from pipelines_dev.containers import ContainerBroker
        from pipelines_dev.ports import free_ports

        broker = ContainerBroker(port=free_ports())
        broker.start()
        try:
            yield SessionBroker(
                "container", broker.bootstrap, broker.stop_broker, broker.start_broker, broker
            )
        finally:
            broker.remove()
        return
    NO_CONTAINERS.append(reason)
    from pipelines_dev.kafka_broker import Broker

    jar = Broker()
    # Reuse a broker already answering there (`make kafka-up`, another checkout's) and leave
    # it running; one this session started is stopped with the session.
    started = not jar.ready()
    if started:
        jar.up()
    try:
        yield SessionBroker("jar", jar.bootstrap, jar.down, jar.up)
    finally:
        if started:
            jar.down()


@pytest.fixture(scope="session")
def kafka(session_broker) -> str:
    """Bootstrap servers of the session's real broker."""
    return session_broker.bootstrap


@pytest.fixture(scope="session")
def container_broker(session_broker):
    """The session broker's container, for tests that run containers beside it."""
    if session_broker.container is None:
        pytest.skip(f"container tests need a Docker engine: {NO_CONTAINERS[0]}")
    return session_broker.container


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
    from pipelines_dev.flink_cluster import Cluster

    cluster = Cluster()
    was_up = cluster.overview() is not None
    cluster.up()
    yield cluster
    if not was_up:
        cluster.down()


@pytest.fixture(scope="session")
def second_cluster(tmp_path_factory, kafka):
    """A standalone cluster that is not the local one, shared by the tests that submit to a
    cluster by address (test_remote_cluster, test_own_settings_job): its own state dir
    (under .local: `make clean` stops it if a run is killed first) and free ports, started
    from another working directory with nothing of this checkout on its PYTHONPATH (a
    package ships the sources its workers import), and PRICING_TOKEN in its daemons'
    environment, where a deployment puts a job's secret. One cluster start for both."""
    from tests.integration.helpers import PRICING_TOKEN, SECOND_CLUSTER_DIR, another_cluster

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PRICING_TOKEN"] = PRICING_TOKEN
    with another_cluster(SECOND_CLUSTER_DIR, tmp_path_factory.mktemp("elsewhere"), env) as address:
        yield address


@pytest.fixture
def enrichment_service():
    """A real enrichment HTTP service on a free port, for one test."""
    from pipelines_dev.enrichment_service import Service
    from pipelines_dev.ports import free_ports

    service = Service(port=free_ports())
    service.up(latency_ms=5)
    yield service
    service.down()
