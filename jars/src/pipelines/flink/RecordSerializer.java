package pipelines.flink;

import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Optional;
import org.apache.flink.connector.kafka.lineage.DefaultKafkaDatasetFacet;
import org.apache.flink.connector.kafka.lineage.DefaultKafkaDatasetIdentifier;
import org.apache.flink.connector.kafka.lineage.KafkaDatasetFacet;
import org.apache.flink.connector.kafka.lineage.KafkaDatasetFacetProvider;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.kafka.shaded.org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.flink.kafka.shaded.org.apache.kafka.common.header.Headers;

/**
 * Writes a Python stage's JSON text records, with the Kafka key, headers and timestamp of the
 * input record each one came from.
 *
 * <p>A record that carries them starts with {@code \u0001key\u0001headers\u0001timestamp\u0001}
 * (written by pipelines.records.lines.with_meta: key base64 or {@code ~} for none, headers as
 * {@link HeaderBytes} in base64 or empty, timestamp in ms or empty); JSON text never holds a
 * raw control character, so the prefix cannot be confused with the record. With
 * {@code keyField}, the key is that JSON field instead (a string as it is, anything else as
 * its JSON); {@code carryHeaders}/{@code carryTimestamp} false drop those.
 */
public final class RecordSerializer
        implements KafkaRecordSerializationSchema<String>, KafkaDatasetFacetProvider {
    private static final long serialVersionUID = 1L;
    public static final char META = '\u0001';

    private final String topic;
    private final String keyField;
    private final boolean carryHeaders;
    private final boolean carryTimestamp;

    public RecordSerializer(
            String topic, String keyField, boolean carryHeaders, boolean carryTimestamp) {
        this.topic = topic;
        this.keyField = keyField;
        this.carryHeaders = carryHeaders;
        this.carryTimestamp = carryTimestamp;
    }

    @Override
    public ProducerRecord<byte[], byte[]> serialize(
            String element, KafkaSinkContext context, Long timestamp) {
        byte[] key = null;
        Headers headers = null;
        Long recordTime = null;
        String json = element;
        if (!element.isEmpty() && element.charAt(0) == META) {
            int k = element.indexOf(META, 1);
            int h = element.indexOf(META, k + 1);
            int t = element.indexOf(META, h + 1);
            String keyText = element.substring(1, k);
            String headerText = element.substring(k + 1, h);
            String timeText = element.substring(h + 1, t);
            json = element.substring(t + 1);
            key = keyText.equals("~") ? null : Base64.getDecoder().decode(keyText);
            if (carryHeaders && !headerText.isEmpty()) {
                headers = HeaderBytes.decode(Base64.getDecoder().decode(headerText));
            }
            if (carryTimestamp && !timeText.isEmpty()) {
                recordTime = Long.valueOf(timeText);
            }
        }
        if (keyField != null) {
            key = JsonFields.keyText(JsonFields.read(json).get(keyField))
                    .getBytes(StandardCharsets.UTF_8);
        }
        return new ProducerRecord<>(
                topic,
                null,
                recordTime != null ? recordTime : timestamp,
                key,
                json.getBytes(StandardCharsets.UTF_8),
                headers);
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
