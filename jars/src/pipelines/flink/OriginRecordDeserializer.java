package pipelines.flink;

import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

/**
 * Hands every Kafka record to Python untouched, together with where it came from.
 *
 * <p>PyFlink's KafkaSource only offers value-only deserializers, which lose the topic,
 * partition and offset; a dead-letter record needs them to be traceable, and parsing in
 * Java would fail the job on the first malformed record instead of routing it. So this
 * never parses: it copies bytes and origin, and Python decides what is valid.
 *
 * <p>The headers travel as one byte array ({@link HeaderBytes#encode}), null when the
 * record has none: Python never reads them, only hands them on to the sink.
 */
public final class OriginRecordDeserializer implements KafkaRecordDeserializationSchema<Row> {
    private static final long serialVersionUID = 1L;

    @Override
    public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Row> out) {
        out.collect(Row.of(
                record.topic(),
                record.partition(),
                record.offset(),
                record.timestamp(),
                record.key(),
                record.value(),
                HeaderBytes.encode(record.headers())));
    }

    @Override
    public TypeInformation<Row> getProducedType() {
        return Types.ROW_NAMED(
                new String[] {
                    "topic", "partition", "offset", "timestamp", "key", "value", "headers"
                },
                Types.STRING,
                Types.INT,
                Types.LONG,
                Types.LONG,
                PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO,
                PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO,
                PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO);
    }
}
