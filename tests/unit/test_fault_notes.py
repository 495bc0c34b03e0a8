"""What a trial notes when a Flink container exited by itself: the fatal line of its log
with the deepest cause under it, so the note names the defect (pipelines_dev.faults)."""

from __future__ import annotations

import pytest

from pipelines_dev.faults import fatal_cause

pytestmark = pytest.mark.unit

# The shape of the TaskManager log the busy broker-pause trial left (FLINK-38790).
LOG = """\
2026-12-04 22:17:05,900 INFO  org.apache.flink.runtime.taskmanager.Task [] - Sink: Writer (1/4) switched from RUNNING to FAILED
2026-12-04 22:17:06,020 ERROR org.apache.flink.runtime.taskexecutor.TaskManagerRunner [] - Fatal error occurred while executing the TaskManager. Shutting it down...
org.apache.flink.util.FlinkException: exception in exception handler of task
\tat org.apache.flink.runtime.taskmanager.Task.run(Task.java:1)
Caused by: org.apache.kafka.common.KafkaException: Cannot execute transactional method because we are in an error state
\tat org.apache.kafka.clients.producer.internals.TransactionManager.maybeFailWithError(TransactionManager.java:1)
Caused by: org.apache.kafka.common.errors.InvalidPidMappingException: The producer attempted to use a producer id which is not currently assigned to its transactional id.
"""


def test_the_note_gives_the_fatal_line_and_the_deepest_cause():
    assert fatal_cause(LOG) == (
        "2026-12-04 22:17:06,020 ERROR org.apache.flink.runtime.taskexecutor.TaskManagerRunner"
        " [] - Fatal error occurred while executing the TaskManager. Shutting it down... | "
        "Caused by: org.apache.kafka.common.errors.InvalidPidMappingException: The producer "
        "attempted to use a producer id which is not currently assigned to its transactional id."
    )


def test_without_a_cause_the_first_exception_under_it_and_without_a_fatal_line_says_so():
    fatal = "x ERROR Fatal error occurred\njava.lang.OutOfMemoryError: Java heap space\n"
    assert (
        fatal_cause(fatal)
        == "x ERROR Fatal error occurred | java.lang.OutOfMemoryError: Java heap space"
    )
    assert fatal_cause("2026 INFO all well\n") == "no fatal line in its log"
