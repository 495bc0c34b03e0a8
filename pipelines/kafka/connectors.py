"""Settings -> KafkaSource / KafkaSink, the only place the connector's builders are called.

The source hands Python each record's raw bytes with its topic, partition and offset (see
jars/src/.../OriginRecordDeserializer.java), so a bad record can be routed to a dead-letter
topic with its origin instead of failing the job. Offsets are committed to Kafka when a
checkpoint completes; they are for monitoring and group-offsets restarts. Flink's own
recovery always uses the checkpoint.
"""

from __future__ import annotations

from pipelines.flink.streams import (
    set_java_record_serializer,
    set_record_deserializer,
    set_transaction_naming,
)
from pipelines.settings import (
    DeliveryGuarantee,
    OffsetReset,
    Settings,
    SinkSettings,
    StartMode,
)
from pipelines.settings.client_properties import java_client_properties

ORIGIN_FIELDS = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]


def origin_type_info():
    """The Python-side type of what OriginRecordDeserializer produces."""
    from pyflink.common import Types

    return Types.ROW_NAMED(
        ORIGIN_FIELDS,
        [
            Types.STRING(),
            Types.INT(),
            Types.LONG(),
            Types.LONG(),
            Types.PRIMITIVE_ARRAY(Types.BYTE()),
            Types.PRIMITIVE_ARRAY(Types.BYTE()),
            Types.PRIMITIVE_ARRAY(Types.BYTE()),  # headers, encoded (jars/src HeaderBytes)
        ],
    )


def _reset_strategy(fallback: OffsetReset):
    from pyflink.datastream.connectors.kafka import KafkaOffsetResetStrategy

    return {
        OffsetReset.EARLIEST: KafkaOffsetResetStrategy.EARLIEST,
        OffsetReset.LATEST: KafkaOffsetResetStrategy.LATEST,
        OffsetReset.FAIL: KafkaOffsetResetStrategy.NONE,
    }[fallback]


def starting_offsets(settings: Settings):
    """The KafkaOffsetsInitializer for the configured start mode."""
    from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaTopicPartition

    start = settings.source.start
    if start.mode is StartMode.GROUP_OFFSETS:
        return KafkaOffsetsInitializer.committed_offsets(_reset_strategy(start.fallback))
    if start.mode is StartMode.EARLIEST:
        return KafkaOffsetsInitializer.earliest()
    if start.mode is StartMode.LATEST:
        return KafkaOffsetsInitializer.latest()
    if start.mode is StartMode.TIMESTAMP:
        return KafkaOffsetsInitializer.timestamp(start.timestamp)
    offsets = {KafkaTopicPartition(o.topic, o.partition): o.offset for o in start.offsets}
    return KafkaOffsetsInitializer.offsets(offsets, _reset_strategy(start.fallback))


KAFKA_DEFAULT_MAX_POLL_RECORDS = 500


def source_properties(settings: Settings, uses: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    """Consumer properties. Behind slow lookups a poll holds at most one round of them (the
    fetcher commits offsets only between polls); a job without enrichment keeps Kafka's
    default."""
    src = settings.source
    props = java_client_properties(settings.kafka)
    derived = (
        settings.enrichment.capacity if "enrichment" in uses else KAFKA_DEFAULT_MAX_POLL_RECORDS
    )
    props["max.poll.records"] = str(src.max_poll_records or derived)
    props.update(src.properties)
    props["isolation.level"] = src.isolation_level.value
    props["commit.offsets.on.checkpoint"] = str(src.commit_offsets_on_checkpoint).lower()
    # Flink commits on checkpoints; Kafka's own periodic auto-commit would race it.
    props["enable.auto.commit"] = "false"
    props["partition.discovery.interval.ms"] = str(
        src.partition_discovery_interval if src.partition_discovery_interval else -1
    )
    return props


def build_source(settings: Settings, uses: tuple[str, ...] | list[str] = ()):
    """A KafkaSource emitting Row(topic, partition, offset, timestamp, key, value, headers); `uses`
    as the job's build wired them (they size polls)."""
    from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
    from pyflink.java_gateway import get_gateway

    src = settings.source
    builder = KafkaSource.builder().set_bootstrap_servers(settings.kafka.bootstrap_servers)
    if src.topics:
        builder.set_topics(*src.topics)
    else:
        builder.set_topic_pattern(src.topic_pattern)
    if src.group_id:
        builder.set_group_id(src.group_id)
    builder.set_starting_offsets(starting_offsets(settings))
    if src.bounded:
        builder.set_bounded(KafkaOffsetsInitializer.latest())
    builder.set_properties(source_properties(settings, uses))
    builder.set_client_id_prefix(f"{settings.job.name}-source")
    set_record_deserializer(builder, get_gateway().jvm.pipelines.flink.OriginRecordDeserializer())
    return builder.build()


_GUARANTEES = {
    DeliveryGuarantee.EXACTLY_ONCE: "EXACTLY_ONCE",
    DeliveryGuarantee.AT_LEAST_ONCE: "AT_LEAST_ONCE",
    DeliveryGuarantee.NONE: "NONE",
}


# Kafka's producer fills batches of 16 KiB (about a hundred of the bench's 150-byte
# records) per partition; 256 KiB ones measured faster for the validating copy and the
# enrichment (docs/performance.md, "Sizing a job"). A batch still goes out after linger.ms
# (Kafka's 5 ms) however full, so no record waits longer for it; kafka.properties.batch.size
# wins.
SINK_BATCH_BYTES = 262_144


def sink_properties(settings: Settings, id_suffix: str = "") -> dict[str, str]:
    """Producer properties of a sink: the project's batch size unless kafka.properties
    names one, the connection, and what the typed settings own."""
    sink: SinkSettings = settings.sink
    props = {"batch.size": str(SINK_BATCH_BYTES), **java_client_properties(settings.kafka)}
    if sink.delivery is DeliveryGuarantee.EXACTLY_ONCE:
        props["transaction.timeout.ms"] = str(sink.transaction_timeout)
    # Kafka's default since 3.0, stated: the config check refuses any other (kafka_clients).
    props["acks"] = "all"
    props["client.id"] = f"{settings.job.name}-sink{id_suffix}"
    return props


def _sink_builder(settings: Settings, id_suffix: str):
    from pyflink.datastream.connectors.base import DeliveryGuarantee as FlinkGuarantee
    from pyflink.datastream.connectors.kafka import KafkaSink

    sink: SinkSettings = settings.sink
    builder = (
        KafkaSink.builder()
        .set_bootstrap_servers(settings.kafka.bootstrap_servers)
        .set_delivery_guarantee(getattr(FlinkGuarantee, _GUARANTEES[sink.delivery]))
    )
    if sink.delivery is DeliveryGuarantee.EXACTLY_ONCE:
        builder.set_transactional_id_prefix(f"{sink.transactional_id_prefix}{id_suffix}")
        set_transaction_naming(builder, sink.transaction_naming.name)
    for key, value in sink_properties(settings, id_suffix).items():
        builder.set_property(key, value)
    return builder


def build_sink(
    settings: Settings,
    topic: str | None = None,
    id_suffix: str = "",
    key_field: str | None = None,
):
    """A KafkaSink of JSON text records to `topic` (the configured sink topic by default),
    with the key, headers and timestamp of the input record each came from when it carries
    them (pipelines.records.lines.with_meta; jars/src RecordSerializer). `key_field` (else
    `sink.key_field` for the main topic) sets the key from a JSON field instead.

    Each sink in a job needs its own transactional id prefix: `id_suffix` derives one for
    side outputs (dead letters, late records) from the configured prefix.
    """
    from pyflink.java_gateway import get_gateway

    sink = settings.sink
    main = topic is None or topic == sink.topic
    serializer = get_gateway().jvm.pipelines.flink.RecordSerializer(
        topic or sink.topic,
        key_field or (sink.key_field if main else None),
        sink.carry_headers,
        sink.carry_timestamp,
    )
    return set_java_record_serializer(_sink_builder(settings, id_suffix), serializer).build()


def build_raw_sink(settings: Settings, topic: str | None = None, id_suffix: str = ""):
    """A KafkaSink of the source's rows to `topic` (the configured sink topic by default),
    written back as they were read: key, value, headers and timestamp byte for byte
    (pipelines.flink.RawRecordSerializer), all in the JVM."""
    from pyflink.java_gateway import get_gateway

    serializer = get_gateway().jvm.pipelines.flink.RawRecordSerializer(topic or settings.sink.topic)
    return set_java_record_serializer(_sink_builder(settings, id_suffix), serializer).build()
