"""The topic helper the tests and benchmarks share: topics are made with the partitions and
topic settings asked for, and an existing topic is left as it is. Read from the broker."""

from __future__ import annotations

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

from pipelines_dev.topics import admin, create_topics, produce, read_messages

pytestmark = pytest.mark.integration


def _partitions(kafka, topic: str) -> int:
    return len(admin(kafka).list_topics(topic, timeout=10).topics[topic].partitions)


def test_created_topic_has_its_partitions_and_settings(kafka, names):
    stamped, plain = names("stamped"), names("plain")
    create_topics(kafka, {stamped: 3}, config={"message.timestamp.type": "LogAppendTime"})
    create_topics(kafka, {plain: 2})
    produce(kafka, stamped, [b"a"])
    produce(kafka, plain, [b"b"])
    assert (_partitions(kafka, stamped), _partitions(kafka, plain)) == (3, 2)
    [stamped_message] = read_messages(kafka, stamped)
    [plain_message] = read_messages(kafka, plain)
    assert stamped_message.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME
    assert plain_message.timestamp()[0] == TIMESTAMP_CREATE_TIME


def test_an_existing_topic_keeps_its_partitions_and_settings(kafka, names):
    topic = names("kept")
    create_topics(kafka, {topic: 2})
    create_topics(kafka, {topic: 4}, config={"message.timestamp.type": "LogAppendTime"})
    produce(kafka, topic, [b"a"])
    assert _partitions(kafka, topic) == 2
    [message] = read_messages(kafka, topic)
    assert message.timestamp()[0] == TIMESTAMP_CREATE_TIME
