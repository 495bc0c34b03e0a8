package pipelines.flink;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/** One JSON record per key and window: {"count", "key", "window_end", "window_start"}. */
public final class CountPerWindow extends ProcessWindowFunction<String, String, String, TimeWindow> {
    private static final long serialVersionUID = 1L;

    @Override
    public void process(String key, Context context, Iterable<String> records,
                        Collector<String> out) {
        long count = 0;
        for (String ignored : records) {
            count++;
        }
        ObjectNode result = JsonFields.MAPPER.createObjectNode();
        result.put("count", count);
        result.put("key", key);
        result.put("window_end", context.window().getEnd());
        result.put("window_start", context.window().getStart());
        out.collect(result.toString());
    }
}
