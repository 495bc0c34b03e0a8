"""The `kafka:` settings translated for each client that connects: the Java clients
inside Flink (KafkaSource, KafkaSink) and librdkafka (confluent-kafka: preflight, offsets,
the demo producer). They spell a few things differently; this is the one place that
knows how. The results hold secrets in clear: hand them to clients, never print them."""

from __future__ import annotations

from pipelines.settings.schema import KafkaConnection, SaslMechanism


def java_client_properties(kafka: KafkaConnection) -> dict[str, str]:
    """Properties for the Java Kafka clients (`kafka.properties` plus the typed security)."""
    props = dict(kafka.properties)
    sec = kafka.security
    props["security.protocol"] = sec.protocol.value
    if sec.sasl_mechanism and sec.username and sec.password:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if sec.sasl_mechanism is SaslMechanism.PLAIN
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        props["sasl.mechanism"] = sec.sasl_mechanism.value
        props["sasl.jaas.config"] = (
            f'{module} required username="{sec.username}" '
            f'password="{sec.password.get_secret_value()}";'
        )
    if sec.ssl_truststore_location:
        props["ssl.truststore.location"] = sec.ssl_truststore_location
    if sec.ssl_truststore_password:
        props["ssl.truststore.password"] = sec.ssl_truststore_password.get_secret_value()
    return props


def librdkafka_config(kafka: KafkaConnection) -> dict[str, str]:
    """The same connection for confluent-kafka (librdkafka spells a few keys differently)."""
    conf = {"bootstrap.servers": kafka.bootstrap_servers}
    sec = kafka.security
    conf["security.protocol"] = sec.protocol.value
    if sec.sasl_mechanism and sec.username and sec.password:
        conf["sasl.mechanism"] = sec.sasl_mechanism.value
        conf["sasl.username"] = sec.username
        conf["sasl.password"] = sec.password.get_secret_value()
    if sec.ssl_truststore_location:
        conf["ssl.ca.location"] = sec.ssl_truststore_location
    return conf
