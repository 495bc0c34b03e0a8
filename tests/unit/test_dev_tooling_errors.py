"""The local tools' own inputs and failures end as one readable line: the demo service's
/admin takes JSON types only, a Flink start script that hangs is ended with what it
started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest

from pipelines.running.processes import group_alive, start_time
from pipelines_dev.enrichment_service import Service
from pipelines_dev.flink_cluster import Cluster, ClusterError
from pipelines_dev.ports import free_ports

pytestmark = pytest.mark.unit


@pytest.fixture
def service(tmp_path):
    service = Service(port=free_ports(), state_dir=tmp_path)
    service.up(latency_ms=1)
    yield service
    service.down()


def _admin(service: Service, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{service.url}/admin",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


@pytest.mark.parametrize(
    "body, error",
    [
        ({"down": "false"}, "down: 'false' is not a JSON boolean (true or false)"),
        ({"down": 1}, "down: 1 is not a JSON boolean (true or false)"),
        ({"latency_ms": "fast"}, "latency_ms: 'fast' is not a number"),
        ({"failure_rate": 2}, "failure_rate: 2 is not between 0 and 1"),
        ({"latency_ms": -5}, "latency_ms: -5 is not a finite number >= 0"),
        ({"unknown": "acme"}, "unknown: 'acme' is not a list of strings"),
        # One bad value: nothing of the request is applied.
        ({"latency_ms": 7, "down": "true"}, "down: 'true' is not a JSON boolean (true or false)"),
    ],
)
def test_admin_refuses_values_of_the_wrong_type_and_changes_nothing(service, body, error):
    status, answer = _admin(service, body)
    assert (status, answer) == (400, {"error": error})
    stats = service.stats()
    assert stats["down"] is False and stats["latency_ms"] == 1


def test_admin_applies_json_booleans_and_numbers(service):
    status, answer = _admin(service, {"down": True, "latency_ms": 3})
    assert status == 200 and answer["down"] is True and answer["latency_ms"] == 3
    status, answer = _admin(service, {"down": False})
    assert status == 200 and answer["down"] is False


def test_down_ends_a_service_that_answers_nothing_and_takes_no_sigterm(tmp_path):
    service = Service(port=free_ports(), state_dir=tmp_path)
    service.up(latency_ms=1)
    pid = service.pid_file.live()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # no health answers; SIGTERM waits until it runs again
    try:
        service.down(grace_s=1)
        assert not group_alive(pid), "down() left the service running"
        assert not service.pid_file.path.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_a_start_script_that_hangs_is_one_error_and_leaves_nothing(tmp_path):
    script = tmp_path / "hangs.sh"
    pid_file = tmp_path / "child.pid"
    script.write_text(f"#!/usr/bin/env bash\nsleep 300 &\necho $! > {pid_file}\nwait\n")
    script.chmod(0o755)
    cluster = Cluster(state_dir=tmp_path / "flink")
    with pytest.raises(ClusterError) as raised:
        cluster._start_daemons(str(script), "start", timeout_s=2)
    assert str(raised.value) == (
        f"hangs.sh start did not return within 2 s; it was stopped with what it started "
        f"(logs: {cluster.log_dir})"
    )
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while start_time(child) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert start_time(child) is None, "the script's child outlived it"
    assert not os.path.exists(cluster.groups_file)


def test_free_ports_come_from_the_range_a_run_was_given(monkeypatch):
    from pipelines_dev.ports import port_range

    monkeypatch.setenv("PIPELINES_PORT_RANGE", "26000-26009")
    assert all(26000 <= free_ports(2) <= 26007 for _ in range(50))
    monkeypatch.setenv("PIPELINES_PORT_RANGE", "26000")
    with pytest.raises(ValueError, match=r"PIPELINES_PORT_RANGE='26000': expected LOW-HIGH"):
        port_range()
    monkeypatch.setenv("PIPELINES_PORT_RANGE", "80-90")
    with pytest.raises(ValueError, match=r"expected 1024 <= LOW < HIGH <= 65535"):
        port_range()


def test_runs_side_by_side_share_the_port_range_without_overlap(monkeypatch):
    """`make test`'s two workers (tests/conftest.py) each take one share."""
    from pipelines_dev.ports import HIGH, LOW, port_range, share

    ranges = []
    for index in range(2):
        monkeypatch.setenv("PIPELINES_PORT_RANGE", share(index, 2))
        ranges.append(port_range())
    (low0, high0), (low1, high1) = ranges
    assert LOW == low0 < high0 < low1 < high1 <= HIGH
    assert high1 - low1 == high0 - low0 >= 5000


def test_the_dev_kafka_clients_keep_librdkafkas_log_lines_off_stderr(capfd):
    """A command's errors are one line each: librdkafka's own log lines (here "Connect to
    ... failed: Connection refused", logged while it retries) must not reach stderr."""
    from confluent_kafka import Producer

    from pipelines_dev.topics import client_conf

    port = free_ports()  # nothing listens there
    producer = Producer(client_conf(f"127.0.0.1:{port}", **{"reconnect.backoff.ms": 50}))
    producer.produce("t", b"x")
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        producer.poll(0.1)
    producer.purge()
    producer.flush(1)
    assert capfd.readouterr().err == ""
