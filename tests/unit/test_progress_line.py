"""The progress line's checkpoint counts, from the documents Flink's REST API answers: a
trigger declined while tasks start (Flink counts it as failed, but no checkpoint began and
it has no id) is told apart from a checkpoint that began and failed."""

from __future__ import annotations

import pytest

from pipelines.running.progress import ProgressMonitor

pytestmark = pytest.mark.unit


def monitor_answering(checkpoints: dict) -> ProgressMonitor:
    monitor = ProgressMonitor("http://127.0.0.1:1", "j1")
    docs = {"/jobs/j1": {"vertices": []}, "/jobs/j1/checkpoints": checkpoints}
    monitor._get = docs.__getitem__  # type: ignore[method-assign]
    return monitor


def test_declined_triggers_are_not_reported_as_failed_checkpoints():
    line = monitor_answering(
        {
            "counts": {"completed": 8, "failed": 3},
            "history": [{"id": i, "status": "COMPLETED"} for i in range(1, 9)],
            "latest": {"completed": {"id": 8, "end_to_end_duration": 84}, "failed": None},
        }
    ).line()
    assert line is not None
    assert line.endswith("3 declined while tasks started | checkpoints 8 completed, 0 failed"), line


def test_checkpoints_that_began_and_failed_are_failures_with_the_last_reason():
    monitor = monitor_answering(
        {
            "counts": {"completed": 1, "failed": 3},
            "history": [
                {"id": 3, "status": "FAILED"},
                {"id": 2, "status": "COMPLETED"},
                {"id": 1, "status": "FAILED"},
            ],
            "latest": {
                "completed": {"id": 2},
                "failed": {"id": 3, "failure_message": "Checkpoint expired before completing."},
            },
        }
    )
    line = monitor.line()
    assert line is not None
    assert line.endswith(
        " | 1 declined while tasks started | checkpoints 1 completed, 2 failed "
        "(last: Checkpoint expired before completing.)"
    ), line


def test_a_failure_seen_once_stays_counted_after_it_leaves_the_history():
    monitor = monitor_answering(
        {"counts": {"completed": 0, "failed": 1}, "history": [{"id": 1, "status": "FAILED"}]}
    )
    monitor.line()
    monitor._get = {  # type: ignore[method-assign]
        "/jobs/j1": {"vertices": []},
        "/jobs/j1/checkpoints": {
            "counts": {"completed": 10, "failed": 1},
            "history": [{"id": i, "status": "COMPLETED"} for i in range(2, 12)],
        },
    }.__getitem__
    assert monitor.line().endswith("checkpoints 10 completed, 1 failed")


def test_the_last_look_at_failures_asks_again_until_the_rest_api_answers():
    history = {
        "exceptionHistory": {
            "entries": [
                {
                    "timestamp": 5,
                    "exceptionName": "java.lang.RuntimeException",
                    "taskName": "parse (1/1)",
                    "stacktrace": "java.lang.RuntimeException: injected",
                }
            ]
        }
    }
    calls = []

    def busy(path: str):
        calls.append(path)
        if len(calls) < 3:
            raise TimeoutError("timed out")
        return history

    monitor = ProgressMonitor("http://127.0.0.1:1", "j1")
    monitor._get = busy  # type: ignore[method-assign]
    assert monitor.failures() == []  # a periodic look: one try
    assert monitor.failures(retry_s=30) == [
        "failure #1 in parse (1/1): java.lang.RuntimeException: injected"
    ]
    assert len(calls) == 3
