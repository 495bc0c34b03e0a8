package pipelines.flink;

import java.util.List;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.types.Row;

/**
 * Batches of the source's rows ({@link OriginRecordDeserializer}) as ONE row of columns:
 * topics, partitions, offsets, timestamps, keys, values, headers, each an array.
 *
 * <p>For thread mode. PyFlink 2.2.1 hands a list of rows to Python through a converter
 * that reuses one array per row, so every element of the list arrives as the last row;
 * arrays are converted element by element into fresh ones. One crossing per batch.
 */
public final class ColumnBatcher extends RowBatching<Row> {
    private static final long serialVersionUID = 1L;

    public ColumnBatcher(int maxSize, long maxDelayMs) {
        this(maxSize, maxDelayMs, false);
    }

    /** With {@code drainMarkers}: an empty batch after each flush at a barrier (RowBatching). */
    public ColumnBatcher(int maxSize, long maxDelayMs, boolean drainMarkers) {
        super(maxSize, maxDelayMs, drainMarkers);
    }

    public static TypeInformation<Row> outputType() {
        TypeInformation<?> bytes = Types.PRIMITIVE_ARRAY(Types.BYTE);
        return Types.ROW_NAMED(
                new String[] {
                    "topics", "partitions", "offsets", "timestamps", "keys", "values", "headers"
                },
                Types.OBJECT_ARRAY(Types.STRING),
                Types.OBJECT_ARRAY(Types.INT),
                Types.OBJECT_ARRAY(Types.LONG),
                Types.OBJECT_ARRAY(Types.LONG),
                Types.OBJECT_ARRAY(bytes),
                Types.OBJECT_ARRAY(bytes),
                Types.OBJECT_ARRAY(bytes));
    }

    @Override
    protected Row toOutput(List<Row> batch) {
        int n = batch.size();
        String[] topics = new String[n];
        Integer[] partitions = new Integer[n];
        Long[] offsets = new Long[n];
        Long[] timestamps = new Long[n];
        byte[][] keys = new byte[n][];
        byte[][] values = new byte[n][];
        byte[][] headers = new byte[n][];
        for (int i = 0; i < n; i++) {
            Row row = batch.get(i);
            topics[i] = (String) row.getField(0);
            partitions[i] = (Integer) row.getField(1);
            offsets[i] = (Long) row.getField(2);
            timestamps[i] = (Long) row.getField(3);
            keys[i] = (byte[]) row.getField(4);
            values[i] = (byte[]) row.getField(5);
            headers[i] = (byte[]) row.getField(6);
        }
        return Row.of(topics, partitions, offsets, timestamps, keys, values, headers);
    }
}
