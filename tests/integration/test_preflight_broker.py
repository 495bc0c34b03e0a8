"""Preflight rules that ask a real broker, through `pipelines doctor`, with their messages."""

from __future__ import annotations

import socket
import time

import pytest

from pipelines.kafka.preflight import broker_problems
from pipelines.settings import load_settings
from pipelines_dev.kafka_broker import Broker, BrokerError
from pipelines_dev.ports import free_ports
from pipelines_dev.topics import create_topics
from tests.support import run_cli, topic_args

pytestmark = pytest.mark.integration


def doctor(kafka, names, *extra, check=False):
    args = ["doctor", "passthrough", *topic_args(kafka, names), *extra]
    return run_cli(*args, check=check, timeout=60)


@pytest.fixture
def topics(kafka, names):
    create_topics(kafka, {names("in"): 3, names("out"): 3})


def test_clean_config_passes(kafka, names, topics):
    proc = doctor(kafka, names)
    assert proc.returncode == 0, proc.stderr
    assert "passthrough: config valid, preflight passed, jars present" in proc.stdout


def test_transaction_timeout_above_default_broker_max(kafka, names, topics):
    proc = doctor(kafka, names, "--set", "sink.transaction_timeout=16min")
    assert proc.returncode == 2
    assert (
        "error: sink.transaction_timeout: 960000 ms (16min) is above the broker's "
        "transaction.max.timeout.ms=900000 (15min): the producer's InitProducerId would fail. "
        "Lower sink.transaction_timeout to at most 900000, or raise "
        "transaction.max.timeout.ms on the broker"
    ) in proc.stdout
    assert proc.stderr.strip() == "error: preflight found 1 error(s); nothing was started"


def test_transaction_limit_is_read_live_from_the_broker(tmp_path, names):
    """A broker configured with a 5 min limit refuses a 10 min timeout that 15 min allows."""
    strict = Broker(
        state_dir=tmp_path / "kafka", port=free_ports(2), transaction_max_timeout_ms=300_000
    )
    strict.up()
    try:
        bootstrap = strict.bootstrap
        create_topics(bootstrap, {names("in"): 1, names("out"): 1})
        proc = doctor(bootstrap, names, "--set", "sink.transaction_timeout=10min")
        assert proc.returncode == 2
        assert (
            "600000 ms (10min) is above the broker's transaction.max.timeout.ms=300000 (5min)"
            in proc.stdout
        )
    finally:
        strict.down()


def test_taken_controller_port_is_named_before_the_broker_starts(tmp_path):
    """The KRaft controller binds port+1: a clash there is one line, not a Java stack trace."""
    port = free_ports(2)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port + 1))
        blocker.listen()
        broker = Broker(state_dir=tmp_path / "kafka", port=port)
        with pytest.raises(BrokerError) as caught:
            broker.up()
    assert str(caught.value) == (
        f"the broker's controller port {port + 1} is taken by another process; stop it or set "
        f"PIPELINES_KAFKA_PORT to a port P with P and P+1 free"
    )
    assert broker.pid() is None


def test_missing_topics_are_named(kafka, names):
    proc = doctor(kafka, names)
    assert proc.returncode == 2
    assert f"error: source.topics: topic '{names('in')}' does not exist on {kafka}" in proc.stdout
    assert f"error: sink.topic: topic '{names('out')}' does not exist on {kafka}" in proc.stdout


def test_missing_late_topic_is_named_for_a_job_made_from_the_windowed_one(kafka, names):
    """Preflight checks window.late_topic for any job that has one, whatever its name."""
    create_topics(kafka, {names("in"): 3, names("out"): 1, names("dlq"): 1})
    settings = load_settings(
        "windowed",
        environ={},
        overrides=[
            f"kafka.bootstrap_servers={kafka}",
            f"source.topics=[{names('in')}]",
            f"sink.topic={names('out')}",
            f"sink.dead_letter_topic={names('dlq')}",
            f"window.late_topic={names('late')}",
        ],
    ).settings
    copied = settings.model_copy(
        update={"job": settings.job.model_copy(update={"name": "my_counts"})}
    )
    assert [str(p) for p in broker_problems(copied)] == [
        f"error: window.late_topic: topic '{names('late')}' does not exist on {kafka}"
    ]


def test_specific_offset_on_missing_partition(kafka, names, topics):
    proc = doctor(
        kafka,
        names,
        "--set",
        "source.start.mode=specific-offsets",
        "--set",
        f"source.start.offsets=[{{topic: {names('in')}, partition: 5, offset: 0}}]",
    )
    assert proc.returncode == 2
    assert (
        f"error: source.start.offsets: {names('in')}:5 does not exist; the topic has "
        f"partitions 0..2"
    ) in proc.stdout


def test_parallelism_above_partitions_warns_but_passes(kafka, names, topics):
    proc = doctor(kafka, names, "--set", "job.parallelism=5")
    assert proc.returncode == 0
    assert (
        f"warning: job.parallelism: 5 is above the 3 partition(s) of {names('in')}: "
        f"2 source subtask(s) will sit idle"
    ) in proc.stdout


def test_unreachable_broker_is_one_line_within_seconds(names):
    port = free_ports()  # nothing listens here
    started = time.monotonic()
    proc = doctor(f"127.0.0.1:{port}", names)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2
    assert (
        f"error: kafka.bootstrap_servers: no Kafka broker answered at 127.0.0.1:{port} within "
        f"5s (start one with `make kafka-up`)"
    ) in proc.stdout
    assert "Traceback" not in proc.stderr and "py4j" not in proc.stderr.lower()
    assert elapsed < 20  # interpreter start + a 5 s probe, not a hang
