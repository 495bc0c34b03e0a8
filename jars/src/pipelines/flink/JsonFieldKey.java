package pipelines.flink;

import org.apache.flink.api.java.functions.KeySelector;

/** The window key: a JSON record's field, a string as it is, anything else as its JSON. */
public final class JsonFieldKey implements KeySelector<String, String> {
    private static final long serialVersionUID = 1L;

    private final String field;

    public JsonFieldKey(String field) {
        this.field = field;
    }

    @Override
    public String getKey(String record) {
        return JsonFields.keyText(JsonFields.read(record).get(field));
    }
}
