"""`down` commands signal only what this checkout started: a pid file or group list left
behind whose ids now belong to other programs is removed with a line, and nothing else is
touched. The stand-in "other programs" are real processes (`sleep`)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess

import pytest

from pipelines.running import processes
from pipelines.running.processes import PidFile, start_identity, wait_started
from pipelines_dev.enrichment_service import Service
from pipelines_dev.flink_cluster import Cluster
from pipelines_dev.kafka_broker import Broker

pytestmark = pytest.mark.unit


@pytest.fixture
def bystander():
    """A process that is not ours, in a session of its own."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_enrichment_down_leaves_a_process_that_took_the_recorded_pid(tmp_path, bystander, caplog):
    service = Service(port=1, state_dir=tmp_path)
    service.pid_file.path.write_text(f"{bystander.pid} {start_identity(bystander.pid)}\n")
    with caplog.at_level(logging.INFO):
        service.down()
    assert bystander.poll() is None, "a process that is not the service was signalled"
    assert not service.pid_file.path.exists()
    assert f"pid {bystander.pid} is another process now" in caplog.text
    assert "removed the stale pid file" in caplog.text


def test_broker_pid_file_of_a_gone_process_is_removed_not_a_traceback(tmp_path, caplog):
    broker = Broker(state_dir=tmp_path)
    broker.pid_file.write_text(f"{_dead_pid()}\n")  # the old format: a pid only
    with caplog.at_level(logging.INFO):
        broker.down()
    assert not broker.pid_file.exists()
    assert "is not running" in caplog.text
    assert "kafka    not running" in caplog.text


def test_a_recorded_start_time_tells_a_reused_pid_from_the_process_that_wrote_it(tmp_path, caplog):
    # Same pid, same command, other start time: what a reboot or pid wrap-around leaves.
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        pid_file = PidFile(tmp_path / "x.pid", "sleep", "test")
        pid_file.write(proc.pid)
        assert pid_file.live() == proc.pid
        pid_file.path.write_text(f"{proc.pid} {start_identity(proc.pid) - 1}\n")
        with caplog.at_level(logging.INFO):
            assert pid_file.live() is None
        assert "is another process now" in caplog.text
    finally:
        proc.kill()
        proc.wait()


def test_a_process_read_the_moment_it_started_is_the_one_that_wrote_the_file(tmp_path):
    # Popen returns when the kernel closes its close-on-exec pipe, before the new program's
    # arguments are mapped: /proc/<pid>/cmdline is empty then (most of the time on this
    # machine). A pid file read at that moment must not be taken for another program's.
    for attempt in range(40):
        proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
        try:
            pid_file = PidFile(tmp_path / f"{attempt}.pid", "sleep", "test")
            pid_file.write(proc.pid)
            assert pid_file.live() == proc.pid, f"attempt {attempt}"
        finally:
            proc.kill()
            proc.wait()


def test_a_process_still_inside_execve_is_the_one_its_start_time_names(
    tmp_path, bystander, monkeypatch
):
    # On a loaded machine the window above can outlast its 2 s wait. Held open here: nothing of
    # the process readable, as inside execve. Its recorded start time still names it.
    monkeypatch.setattr(processes, "command_line", lambda pid: "")
    monkeypatch.setattr(processes, "environment", lambda pid: {})
    monkeypatch.setattr(processes, "EXEC_WAIT_S", 0.1)
    pid_file = PidFile(tmp_path / "x.pid", "enrichment_service", "test")
    pid_file.write(bystander.pid)
    assert pid_file.live() == bystander.pid
    # Without a start time (a file of the old format) nothing names it: stale, not signalled.
    pid_file.path.write_text(f"{bystander.pid}\n")
    assert pid_file.live() is None
    assert not pid_file.path.exists()


def test_cluster_groups_are_ended_only_when_they_are_still_the_clusters(tmp_path, bystander):
    cluster = Cluster(state_dir=tmp_path)
    cluster.conf_dir.mkdir(parents=True)
    # A group that is the cluster's: a daemon (here a stand-in) whose environment names
    # the cluster's conf dir, as the Flink daemons' and their Python workers' do.
    ours = subprocess.Popen(
        ["sleep", "120"],
        start_new_session=True,
        env={**os.environ, "FLINK_CONF_DIR": str(cluster.conf_dir)},
    )
    try:
        cluster.groups_file.write_text(f"{bystander.pid}\n{ours.pid}\n{_dead_pid()}\n")
        assert cluster.recorded_groups() == [ours.pid]
    finally:
        os.killpg(ours.pid, signal.SIGKILL)
        ours.wait()


def test_wait_started_tells_ready_from_exited_from_too_slow():
    """The one start-up wait the local services share: ready, exited first (returncode set),
    or not ready in time (still running, returncode None)."""
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert wait_started(sleeper, lambda: True, 5) is True
        assert wait_started(sleeper, lambda: False, 0.5) is False
        assert sleeper.returncode is None
    finally:
        sleeper.kill()
        sleeper.wait()
    failing = subprocess.Popen(["sh", "-c", "exit 3"])
    assert wait_started(failing, lambda: False, 30) is False
    assert failing.returncode == 3
