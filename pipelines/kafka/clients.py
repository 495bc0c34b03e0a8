"""confluent-kafka clients for the CLI's own work (preflight, offsets, demo data): quiet,
and failing in one readable line when no broker answers.

librdkafka logs every failed connection to stderr and its calls raise KafkaException with
a code-laden repr; a user who mistyped a bootstrap address should read one sentence.
"""

from __future__ import annotations

import logging
import os


class BrokerUnreachable(Exception):
    """No Kafka broker answered at the configured bootstrap servers, or it refused us
    (authentication, TLS): the message is the one line to print, `key` the setting to fix."""

    def __init__(self, message: str, key: str = "kafka.bootstrap_servers"):
        super().__init__(message)
        self.key = key


def refusal(
    bootstrap: str, errors: list, conf: dict, trusted: str | None
) -> BrokerUnreachable | None:
    """The one line for a broker that answered but refused the connection, from the errors
    librdkafka reported while connecting (its error_cb)."""
    from confluent_kafka import KafkaError

    for error in errors:
        text = error.str()
        if error.code() == KafkaError._AUTHENTICATION or "SASL authentication error" in text:
            reason = text.split("SASL authentication error: ", 1)[-1].split(" (after ")[0]
            who = f"{conf.get('sasl.mechanism')} as user {conf.get('sasl.username')!r}"
            return BrokerUnreachable(
                f"authentication failed at {bootstrap} ({who}): {reason}", "kafka.security"
            )
        if "certificate verify failed" in text:
            return BrokerUnreachable(
                f"the broker's certificate at {bootstrap} is not trusted by "
                f"{trusted or conf.get('ssl.ca.location') or 'the system CAs'} "
                f"(certificate verify failed)",
                "kafka.security.ssl_truststore_location",
            )
        if "SSL handshake failed" in text:
            reason = text.split("SSL handshake failed: ", 1)[-1].split(" (after ")[0]
            return BrokerUnreachable(
                f"the TLS handshake with {bootstrap} failed: {reason}", "kafka.security"
            )
    return None


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


def admin_client(
    bootstrap: str, conf: dict | None = None, timeout_s: float = 5.0, trusted: str | None = None
):
    """An AdminClient that has already seen the cluster's metadata, or BrokerUnreachable
    saying whether no broker answered, the login failed or the certificate is untrusted."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list = []
    config = {**client_config(bootstrap, conf, timeout_s), "error_cb": errors.append}
    try:
        admin = AdminClient(config)
    except KafkaException as exc:  # a bad store or property: librdkafka says which
        raise BrokerUnreachable(f"the Kafka client refused its config: {exc.args[0].str()}")
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException:
        metadata = None
    if metadata is None or not metadata.brokers:
        admin.poll(0)  # serves error_cb with what went wrong while connecting
        raise refusal(bootstrap, errors, config, trusted) or BrokerUnreachable(
            unreachable_message(bootstrap, timeout_s)
        )
    return admin


def local_bootstrap() -> str:
    """The local broker's address (`pipelines-dev kafka up`; port $PIPELINES_KAFKA_PORT)."""
    return f"127.0.0.1:{os.environ.get('PIPELINES_KAFKA_PORT', '9092')}"
