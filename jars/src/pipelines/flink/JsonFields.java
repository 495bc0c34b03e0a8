package pipelines.flink;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;

/** JSON reading shared by the windowed job's Java operators (Flink's shaded Jackson). */
final class JsonFields {
    static final ObjectMapper MAPPER = new ObjectMapper();

    private JsonFields() {}

    static JsonNode read(String json) {
        try {
            return MAPPER.readTree(json);
        } catch (java.io.IOException e) {
            // Only records the parse stage accepted get here: this is a bug, not bad data.
            throw new IllegalStateException("a parsed record is not JSON: " + e.getMessage(), e);
        }
    }

    /** A field as key text: a string as it is, anything else as its JSON. */
    static String keyText(JsonNode node) {
        return node == null ? "null" : node.isTextual() ? node.textValue() : node.toString();
    }
}
