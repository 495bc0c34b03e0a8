package pipelines.flink;

import java.util.ArrayList;
import java.util.List;
import org.apache.flink.streaming.api.operators.AbstractStreamOperator;
import org.apache.flink.streaming.api.operators.OneInputStreamOperator;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.api.common.operators.ProcessingTimeService.ProcessingTimeCallback;
import org.apache.flink.types.Row;

/**
 * Groups records into batches of up to {@code maxSize}, so the Python side pays its
 * per-element cost (crossing into Python, PyFlink's async bookkeeping) once per batch
 * instead of once per record. Subclasses choose the batch's shape.
 *
 * <p>It holds no state across checkpoints: the open batch is emitted before every
 * checkpoint barrier ({@link #prepareSnapshotPreBarrier}), and at the latest after
 * {@code maxDelayMs} by a processing-time timer, so exactly-once is untouched and a quiet
 * stream adds at most {@code maxDelayMs} of latency. It is also emitted before every
 * watermark, so no record falls behind a watermark it came before.
 */
public abstract class RowBatching<OUT> extends AbstractStreamOperator<OUT>
        implements OneInputStreamOperator<Row, OUT>, ProcessingTimeCallback {
    private static final long serialVersionUID = 1L;

    private final int maxSize;
    private final long maxDelayMs;
    private transient List<Row> batch;
    private transient boolean timerPending;

    protected RowBatching(int maxSize, long maxDelayMs) {
        this.maxSize = maxSize;
        this.maxDelayMs = maxDelayMs;
    }

    @Override
    public void open() throws Exception {
        super.open();
        batch = new ArrayList<>(maxSize);
    }

    @Override
    public void processElement(StreamRecord<Row> element) throws Exception {
        batch.add(element.getValue());
        if (batch.size() >= maxSize) {
            flush();
        } else if (!timerPending) {
            timerPending = true;
            long now = getProcessingTimeService().getCurrentProcessingTime();
            getProcessingTimeService().registerTimer(now + maxDelayMs, this);
        }
    }

    @Override
    public void onProcessingTime(long timestamp) throws Exception {
        timerPending = false;
        flush();
    }

    /** Records before a watermark stay before it: a batch held past one would be late. */
    @Override
    public void processWatermark(Watermark mark) throws Exception {
        flush();
        super.processWatermark(mark);
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flush();
    }

    @Override
    public void finish() throws Exception {
        flush();
        super.finish();
    }

    /** One batch as the element that goes out; the list is not used after this. */
    protected abstract OUT toOutput(List<Row> batch);

    private void flush() {
        if (!batch.isEmpty()) {
            output.collect(new StreamRecord<>(toOutput(batch)));
            batch = new ArrayList<>(maxSize);
        }
    }
}
