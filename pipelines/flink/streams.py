"""Stream wiring PyFlink has no public call for: a DataStream's Java stream and back, the
project's Java operators (SplitLines, window counts) inserted, the Kafka connectors' Java
serializers and transaction naming set. Written for apache-flink 2.2.1 and the pinned Kafka
connector (tests/unit/test_flink_compat.py)."""

from __future__ import annotations


def set_record_deserializer(builder, j_deserializer) -> None:
    """Give a KafkaSource builder a Java KafkaRecordDeserializationSchema (PyFlink 2.2 only
    offers value-only deserializers; the builder's Java object is `_j_builder`)."""
    builder._j_builder.setDeserializer(j_deserializer)


def java_stream(stream):
    """The Java DataStream behind a PyFlink one (PyFlink 2.2: `_j_data_stream`), to insert
    the project's Java operators (jars/src) where PyFlink has no API for them."""
    return stream._j_data_stream


def python_stream(j_stream):
    from pyflink.datastream import DataStream

    return DataStream(j_stream)


def split_lines(stream, keep_marked: bool):
    """A batched Python stage's output back as records: each element split at newlines,
    keeping the lines that start (keep_marked) or do not start with U+0000, the mark
    stripped. pipelines.flink.SplitLines, run in the JVM."""
    from pyflink.common import Types
    from pyflink.java_gateway import get_gateway

    split = get_gateway().jvm.pipelines.flink.SplitLines(keep_marked)
    return python_stream(java_stream(stream).flatMap(split, Types.STRING().get_java_type_info()))


def set_transaction_naming(builder, name: str):
    """KafkaSinkBuilder.setTransactionNamingStrategy (connector 4.0+), which PyFlink 2.2's
    builder does not wrap; `name` is the Java enum constant (INCREMENTING, POOLING)."""
    from pyflink.java_gateway import get_gateway

    strategies = get_gateway().jvm.org.apache.flink.connector.kafka.sink.TransactionNamingStrategy
    builder._j_builder.setTransactionNamingStrategy(strategies.valueOf(name))
    return builder


def set_java_record_serializer(builder, j_serializer):
    """KafkaSinkBuilder.setRecordSerializer with a Java KafkaRecordSerializationSchema.
    PyFlink 2.2's set_record_serializer reads a `topicSelector` field that only the
    connector's own builder-made schema has, so this goes to the Java builder
    (`_j_builder`) directly."""
    builder._j_builder.setRecordSerializer(j_serializer)
    return builder


def window_counts_in_jvm(
    stream, j_watermark_strategy, key_field: str, time_field: str, size_ms: int, lateness_ms: int
):
    """Event time, key, tumbling window and count, all in the JVM (pipelines.flink:
    JsonFieldKey, CountPerWindow, LateRecord) over JSON records the parse stage accepted.
    Returns (the stream after event time, counts, late records wrapped with the reason).

    PyFlink would run a Python call per record for the key selector and the window function;
    neither needs Python."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    duration = jvm.java.time.Duration.ofMillis
    project = jvm.pipelines.flink
    timed = java_stream(stream).assignTimestampsAndWatermarks(j_watermark_strategy)
    string_type = jvm.org.apache.flink.api.common.typeinfo.Types.STRING
    late_tag = jvm.org.apache.flink.util.OutputTag("late-records", string_type)
    windows = jvm.org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows
    counts = (
        timed.keyBy(project.JsonFieldKey(key_field))
        .window(windows.of(duration(size_ms)))
        .allowedLateness(duration(lateness_ms))
        .sideOutputLateData(late_tag)
        .process(project.CountPerWindow())
    )
    late = counts.getSideOutput(late_tag).map(project.LateRecord(key_field, time_field))
    return python_stream(timed), python_stream(counts), python_stream(late)
