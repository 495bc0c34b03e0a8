package pipelines.flink;

import java.util.List;
import java.util.Optional;
import org.apache.flink.connector.kafka.lineage.DefaultKafkaDatasetFacet;
import org.apache.flink.connector.kafka.lineage.DefaultKafkaDatasetIdentifier;
import org.apache.flink.connector.kafka.lineage.KafkaDatasetFacet;
import org.apache.flink.connector.kafka.lineage.KafkaDatasetFacetProvider;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.flink.types.Row;

/**
 * Writes the rows {@link OriginRecordDeserializer} reads back to Kafka as they came: the same
 * key bytes, value bytes (a null value stays a tombstone), headers and record timestamp.
 *
 * <p>With this on the sink and the deserializer on the source, a copy job never leaves the
 * JVM: no record crosses into Python, nothing is decoded, so the output is byte for byte the
 * input.
 */
public final class RawRecordSerializer
        implements KafkaRecordSerializationSchema<Row>, KafkaDatasetFacetProvider {
    private static final long serialVersionUID = 1L;

    private final String topic;

    public RawRecordSerializer(String topic) {
        this.topic = topic;
    }

    @Override
    public ProducerRecord<byte[], byte[]> serialize(
            Row row, KafkaSinkContext context, Long timestamp) {
        Number recordTime = (Number) row.getField(3);
        return new ProducerRecord<>(
                topic,
                null,
                recordTime != null && recordTime.longValue() >= 0
                        ? Long.valueOf(recordTime.longValue()) : timestamp,
                (byte[]) row.getField(4),
                (byte[]) row.getField(5),
                HeaderBytes.decode((byte[]) row.getField(6)));
    }

    /**
     * The topic written, for the sink's lineage and for {@code sink.transaction_naming:
     * pooling}: the connector's POOLING strategy lists the open transactions that wrote to
     * the sink's topics on recovery, and refuses a serializer that does not name them.
     */
    @Override
    public Optional<KafkaDatasetFacet> getKafkaDatasetFacet() {
        return Optional.of(
                new DefaultKafkaDatasetFacet(DefaultKafkaDatasetIdentifier.ofTopics(List.of(topic))));
    }
}
