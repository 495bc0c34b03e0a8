"""Failures of the broker behind a command end as one line naming the topic and the
broker's reason, exit 2: nothing reports success for records that were not written."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import run_cli

pytestmark = pytest.mark.integration


def test_demo_records_the_broker_refuses_are_one_error_not_success(kafka, names):
    # A topic that takes no record as large as a demo record: every produce fails.
    admin = AdminClient({"bootstrap.servers": kafka})
    topic = names("in")
    futures = admin.create_topics(
        [
            NewTopic(
                topic, num_partitions=1, replication_factor=1, config={"max.message.bytes": "40"}
            )
        ]
    )
    futures[topic].result(30)
    proc = run_cli(
        "demo",
        "passthrough",
        "--records",
        "5",
        "--set",
        f"kafka.bootstrap_servers={kafka}",
        "--set",
        f"source.topics=[{topic}]",
        "--set",
        f"sink.topic={names('out')}",
        check=False,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"error: produce to {topic}: 5 of 5 record(s) failed: Broker: Message size too large\n"
    ), proc.stderr
    assert "produced" not in proc.stdout
