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
 *
 * <p>With {@code drainMarkers} (for a Python stage that keeps work in flight across
 * batches, the flowing enrichment) an EMPTY batch follows every flush before a checkpoint
 * barrier, a watermark and the end of input, and is sent once the input has been quiet for
 * {@code maxDelayMs} after a batch: the stage answers it by emitting everything it holds.
 * A chain prepares its snapshot from its head forward, so the marker reaches the stage,
 * and is answered, before the stage's own barrier work (thread mode: synchronously;
 * process mode: the Python operator finishes its bundle, marker included).
 */
public abstract class RowBatching<OUT> extends AbstractStreamOperator<OUT>
        implements OneInputStreamOperator<Row, OUT>, ProcessingTimeCallback {
    private static final long serialVersionUID = 1L;

    private final int maxSize;
    private final long maxDelayMs;
    private transient List<Row> batch;
    private final boolean drainMarkers;
    private transient boolean timerPending;
    private transient boolean sentSinceMarker;
    private transient long lastFlushMs;

    protected RowBatching(int maxSize, long maxDelayMs, boolean drainMarkers) {
        this.maxSize = maxSize;
        this.maxDelayMs = maxDelayMs;
        this.drainMarkers = drainMarkers;
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
        } else {
            armTimer();
        }
    }

    private void armTimer() {
        armTimer(getProcessingTimeService().getCurrentProcessingTime() + maxDelayMs);
    }

    private void armTimer(long at) {
        if (!timerPending) {
            timerPending = true;
            getProcessingTimeService().registerTimer(at, this);
        }
    }

    @Override
    public void onProcessingTime(long timestamp) throws Exception {
        timerPending = false;
        if (!batch.isEmpty()) {
            flush();
        } else if (sentSinceMarker) {
            long quiet = lastFlushMs + maxDelayMs;
            if (timestamp >= quiet) {
                drain(); // quiet since the last batch: let the stage emit what it holds
            } else {
                // A batch went out since this timer was set: the input is not quiet. (A
                // drain here, between two full batches, made the stage wait for every
                // lookup in flight many times a second.)
                armTimer(quiet);
            }
        }
    }

    /** Records before a watermark stay before it: a batch held past one would be late. */
    @Override
    public void processWatermark(Watermark mark) throws Exception {
        flush();
        drain();
        super.processWatermark(mark);
    }

    @Override
    public void prepareSnapshotPreBarrier(long checkpointId) throws Exception {
        flush();
        drain();
    }

    @Override
    public void finish() throws Exception {
        flush();
        drain();
        super.finish();
    }

    /** One batch as the element that goes out; the list is not used after this. */
    protected abstract OUT toOutput(List<Row> batch);

    private void flush() {
        if (!batch.isEmpty()) {
            output.collect(new StreamRecord<>(toOutput(batch)));
            batch = new ArrayList<>(maxSize);
            if (drainMarkers) {
                sentSinceMarker = true;
                lastFlushMs = getProcessingTimeService().getCurrentProcessingTime();
                armTimer();
            }
        }
    }

    /** The drain marker (an empty batch), when batches went out since the last one. */
    private void drain() {
        if (drainMarkers && sentSinceMarker) {
            sentSinceMarker = false;
            output.collect(new StreamRecord<>(toOutput(new ArrayList<>(0))));
        }
    }
}
