package pipelines.flink;

import org.apache.flink.api.common.eventtime.SerializableTimestampAssigner;

/**
 * Event time from a JSON record's field (epoch milliseconds), in the JVM: the parse stage
 * has already dead-lettered every record whose field is missing or not a non-negative
 * integer, so no Python call per record is needed to read it.
 */
public final class JsonEventTime implements SerializableTimestampAssigner<String> {
    private static final long serialVersionUID = 1L;

    private final String field;

    public JsonEventTime(String field) {
        this.field = field;
    }

    @Override
    public long extractTimestamp(String record, long recordTimestamp) {
        return JsonFields.read(record).get(field).asLong();
    }
}
