package pipelines.flink;

import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.util.Collector;

/**
 * Splits a Python stage's output into records and dead letters, in the JVM.
 *
 * <p>PyFlink's async operator cannot emit to a side output, so the enrichment stage marks a
 * dead letter by prefixing it with U+0000 (which JSON text never starts with). Two of
 * these, one keeping marked and one unmarked elements, route them to their sinks without
 * a second crossing into Python.
 */
public final class MarkedSplit implements FlatMapFunction<String, String> {
    private static final long serialVersionUID = 1L;
    public static final char MARK = '\u0000';

    private final boolean keepMarked;

    public MarkedSplit(boolean keepMarked) {
        this.keepMarked = keepMarked;
    }

    @Override
    public void flatMap(String value, Collector<String> out) {
        boolean marked = !value.isEmpty() && value.charAt(0) == MARK;
        if (marked == keepMarked) {
            out.collect(marked ? value.substring(1) : value);
        }
    }
}
