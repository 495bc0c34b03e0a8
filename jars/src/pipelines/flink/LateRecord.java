package pipelines.flink;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

/** A record later than its window's allowed lateness, wrapped with why for the late topic. */
public final class LateRecord implements MapFunction<String, String> {
    private static final long serialVersionUID = 1L;
    public static final String REASON = "later than the window's allowed lateness";

    private final String keyField;
    private final String timeField;

    public LateRecord(String keyField, String timeField) {
        this.keyField = keyField;
        this.timeField = timeField;
    }

    @Override
    public String map(String value) {
        JsonNode record = JsonFields.read(value);
        ObjectNode late = JsonFields.MAPPER.createObjectNode();
        late.set("event_time", record.get(timeField));
        late.set("key", record.get(keyField));
        late.put("reason", REASON);
        late.set("record", record);
        return late.toString();
    }
}
