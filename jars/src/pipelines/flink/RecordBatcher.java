package pipelines.flink;

import java.util.List;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.java.typeutils.ListTypeInfo;
import org.apache.flink.types.Row;

/** Batches as lists of rows: the shape process mode's Python worker receives. */
public final class RecordBatcher extends RowBatching<List<Row>> {
    private static final long serialVersionUID = 1L;

    public RecordBatcher(int maxSize, long maxDelayMs) {
        this(maxSize, maxDelayMs, false);
    }

    /** With {@code drainMarkers}: an empty batch after each flush at a barrier (RowBatching). */
    public RecordBatcher(int maxSize, long maxDelayMs, boolean drainMarkers) {
        super(maxSize, maxDelayMs, drainMarkers);
    }

    /** The output type for a batch of rows of {@code rowType}. */
    public static TypeInformation<List<Row>> outputType(TypeInformation<Row> rowType) {
        return new ListTypeInfo<>(rowType);
    }

    @Override
    protected List<Row> toOutput(List<Row> batch) {
        return batch;
    }
}
