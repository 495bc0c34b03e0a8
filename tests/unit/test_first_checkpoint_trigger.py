"""The run's own first-checkpoint trigger (ProgressMonitor.first_checkpoint), against the
documents Flink's REST API answers (shapes read from a Flink 2.2 mini-cluster): it waits
for every task to run, follows its trigger by request id, and makes a failed one again
rather than leaving the first output to the next periodic checkpoint."""

from __future__ import annotations

import io
import urllib.error

import pytest

from pipelines.running.progress import ProgressMonitor

pytestmark = pytest.mark.unit

RUNNING = {"state": "RUNNING", "vertices": [{"parallelism": 2, "tasks": {"RUNNING": 2}}]}
STARTING = {"state": "RUNNING", "vertices": [{"parallelism": 2, "tasks": {"RUNNING": 1}}]}
NONE_YET = {"counts": {"completed": 0, "in_progress": 0, "failed": 0}}
FAILED = {
    "status": {"id": "COMPLETED"},
    "operation": {
        "failureCause": {
            "class": "java.util.concurrent.CompletionException",
            "stack-trace": "org.apache.flink.runtime.checkpoint.CheckpointException: "
            "Checkpoint expired before completing.",
        }
    },
}
DONE = {"status": {"id": "COMPLETED"}, "operation": {"checkpointId": 1}}
UNDER_WAY = {"status": {"id": "IN_PROGRESS"}, "operation": None}


class FakeRest:
    """Answers GETs from a dict the test changes, records POSTs, hands out request ids."""

    def __init__(self, docs: dict):
        self.docs = docs
        self.posts: list[str] = []
        self.refuse: int | None = None

    def get(self, path: str):
        return self.docs[path]

    def post(self, path: str, body: dict):
        if self.refuse:
            raise urllib.error.HTTPError(path, self.refuse, "refused", {}, io.BytesIO())  # type: ignore[arg-type]
        assert body == {"checkpointType": "CONFIGURED"}
        self.posts.append(path)
        return {"request-id": f"r{len(self.posts)}"}


def monitor_on(rest: FakeRest) -> ProgressMonitor:
    monitor = ProgressMonitor("http://127.0.0.1:1", "j1")
    monitor._get = rest.get  # type: ignore[method-assign]
    monitor._post = rest.post  # type: ignore[method-assign]
    return monitor


def test_no_trigger_until_every_task_runs_then_one_followed_to_completion():
    rest = FakeRest({"/jobs/j1": STARTING, "/jobs/j1/checkpoints": NONE_YET})
    monitor = monitor_on(rest)
    assert monitor.first_checkpoint() is False
    assert rest.posts == []
    rest.docs["/jobs/j1"] = RUNNING
    assert monitor.first_checkpoint() is False  # triggered, not yet completed
    assert rest.posts == ["/jobs/j1/checkpoints"]
    rest.docs["/jobs/j1/checkpoints/r1"] = UNDER_WAY
    assert monitor.first_checkpoint() is False
    rest.docs["/jobs/j1/checkpoints/r1"] = DONE
    assert monitor.first_checkpoint() is True
    assert len(rest.posts) == 1


def test_a_failed_trigger_is_made_again_a_second_later(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("pipelines.running.progress.time.monotonic", lambda: clock[0])
    rest = FakeRest({"/jobs/j1": RUNNING, "/jobs/j1/checkpoints": NONE_YET})
    monitor = monitor_on(rest)
    assert monitor.first_checkpoint() is False
    rest.docs["/jobs/j1/checkpoints/r1"] = FAILED
    assert monitor.first_checkpoint() is False
    assert len(rest.posts) == 1  # not at once
    clock[0] += 1.1
    assert monitor.first_checkpoint() is False
    assert len(rest.posts) == 2
    rest.docs["/jobs/j1/checkpoints/r2"] = DONE
    assert monitor.first_checkpoint() is True


def test_a_completed_periodic_checkpoint_is_enough_and_one_under_way_is_watched():
    rest = FakeRest({"/jobs/j1": RUNNING, "/jobs/j1/checkpoints": {"counts": {"in_progress": 1}}})
    monitor = monitor_on(rest)
    assert monitor.first_checkpoint() is False
    assert rest.posts == []
    rest.docs["/jobs/j1/checkpoints"] = {"counts": {"completed": 1, "in_progress": 0}}
    assert monitor.first_checkpoint() is True
    assert rest.posts == []


def test_a_jobmanager_refusing_manual_checkpoints_is_left_to_the_periodic_ones():
    rest = FakeRest({"/jobs/j1": RUNNING, "/jobs/j1/checkpoints": NONE_YET})
    rest.refuse = 503
    monitor = monitor_on(rest)
    assert monitor.first_checkpoint() is False  # a server error: between states, try again
    rest.refuse = 400
    assert monitor.first_checkpoint() is True
