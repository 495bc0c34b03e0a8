package pipelines.flink;

import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.util.Collector;

/**
 * Turns a Python stage's batch output back into records, in the JVM.
 *
 * <p>A batched Python stage returns one string per batch: its records joined by newlines
 * (JSON text never holds a raw newline). Each line may start with U+0000 to mark a dead
 * letter; one of these keeps marked lines (the mark stripped), the other the rest, so a
 * batch crosses the Java/Python boundary once in each direction.
 */
public final class SplitLines implements FlatMapFunction<String, String> {
    private static final long serialVersionUID = 1L;
    public static final char MARK = '\u0000';

    private final boolean keepMarked;

    public SplitLines(boolean keepMarked) {
        this.keepMarked = keepMarked;
    }

    @Override
    public void flatMap(String batch, Collector<String> out) {
        int start = 0;
        int length = batch.length();
        while (start < length) {
            int end = batch.indexOf('\n', start);
            if (end < 0) {
                end = length;
            }
            if (end > start) {
                boolean marked = batch.charAt(start) == MARK;
                if (marked == keepMarked) {
                    out.collect(batch.substring(marked ? start + 1 : start, end));
                }
            }
            start = end + 1;
        }
    }
}
