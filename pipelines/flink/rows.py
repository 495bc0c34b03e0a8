"""What a Python function sees on a worker: its subtask, whether it runs in thread mode, a row's
fields, and a batch of rows as PyFlink 2.2.1 hands it over in thread mode (one row of
columns). Imported on the workers: nothing here starts or needs a gateway."""

from __future__ import annotations


def subtask_index(runtime_context) -> int:
    """This subtask's index from a Python function's runtime context, in either mode.

    PyFlink 2.2.1's thread-mode runtime context (fn_execution/datastream/embedded) calls the
    Java `RuntimeContext.getIndexOfThisSubtask`, which Flink 2.0 moved to `TaskInfo`: the
    call fails with AttributeError on the pemja object. Its `_runtime_context` is that Java
    context. tests/unit/test_flink_compat.py fails once PyFlink's own call works again.
    """
    try:
        return runtime_context.get_index_of_this_subtask()
    except AttributeError:
        return runtime_context._runtime_context.getTaskInfo().getIndexOfThisSubtask()


def is_thread_mode(runtime_context) -> bool:
    """Whether a Python function runs in thread mode (its runtime context is PyFlink's
    fn_execution.datastream.embedded one).

    What differs there for the project's stages: a gauge is a Python callable that Flink's
    metrics thread calls through pemja, and a call after the task's interpreter is gone
    kills the JVM (SIGSEGV in take_gil, seen at a job's end on 2.2.1). Stages count with
    counters in thread mode instead."""
    return ".embedded." in type(runtime_context).__module__


def row_fields(row):
    """A source Row's fields in either execution mode, to unpack by position.

    PyFlink 2.2.1's thread mode hands a Java Row to Python as a plain tuple, (its RowKind's
    ordinal, (the fields...)); process mode as a pyflink Row, which unpacks to its fields.
    Beam's rows (NamedTuple subclasses) and column_rows' tuples pass through as they are."""
    return row[1] if type(row) is tuple and len(row) == 2 else row


def column_rows(batch):
    """The source rows of a Java ColumnBatcher batch, each a plain tuple of its fields.

    Thread mode's batches: PyFlink 2.2.1 converts a list of Rows for Python with one
    reused array per row, so every element arrives as the last row; the ColumnBatcher
    sends one row of arrays instead, which are converted element by element."""
    return zip(*row_fields(batch))
