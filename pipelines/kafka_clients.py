"""confluent-kafka clients for the CLI's own work (preflight, offsets, demo data): quiet,
and failing in one readable line when no broker answers.

librdkafka logs every failed connection to stderr and its calls raise KafkaException with
a code-laden repr; a user who mistyped a bootstrap address should read one sentence.
"""

from __future__ import annotations

import logging
import os


class BrokerUnreachable(Exception):
    """No Kafka broker answered at the configured bootstrap servers."""


def quiet_logger() -> logging.Logger:
    logger = logging.getLogger("pipelines.librdkafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def client_config(bootstrap: str, conf: dict | None = None, timeout_s: float = 5.0) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        **(conf or {}),
        "socket.timeout.ms": int(timeout_s * 1000),
        "socket.connection.setup.timeout.ms": int(timeout_s * 1000),
        "logger": quiet_logger(),
    }


def unreachable_message(bootstrap: str, timeout_s: float = 5.0) -> str:
    return (
        f"no Kafka broker answered at {bootstrap} within {timeout_s:.0f}s "
        f"(start one with `make kafka-up`)"
    )


def admin_client(bootstrap: str, conf: dict | None = None, timeout_s: float = 5.0):
    """An AdminClient that has already seen the cluster's metadata, or BrokerUnreachable."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_config(bootstrap, conf, timeout_s))
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException:
        metadata = None
    if metadata is None or not metadata.brokers:
        raise BrokerUnreachable(unreachable_message(bootstrap, timeout_s))
    return admin


def local_bootstrap() -> str:
    """The local broker's address (`pipelines kafka up`; port $PIPELINES_KAFKA_PORT)."""
    return f"127.0.0.1:{os.environ.get('PIPELINES_KAFKA_PORT', '9092')}"
