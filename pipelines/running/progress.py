"""A running job's progress line (records in and out, the last checkpoint) and its failures,
read from the job's REST API."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from pipelines.flink.metrics import metric_totals
from pipelines.running.errors import MAX_ERROR_CHARS, explain_python_error, last_cause

log = logging.getLogger(__name__)

# How long after submission a client watches for every task to run, to trigger the first
# checkpoint then (ProgressMonitor.first_checkpoint); after it the periodic ones go on alone.
FIRST_CHECKPOINT_WAIT_S = 180.0


class ProgressMonitor:
    """Records in/out and the last checkpoint, read from the job's REST API."""

    def __init__(self, base_url: str | None, job_id: str, trace_log: Path | None = None):
        self.base = base_url
        self.job_id = job_id
        self.trace_log = trace_log
        self._last_checkpoints = 0
        self._failures_seen: set[tuple] = set()
        self._failed_ids: set[int] = set()  # checkpoints that started and failed
        self._trigger: str | None = None  # the request id of our first-checkpoint trigger
        self._next_try = 0.0  # when a failed trigger may be made again

    def failures(self, retry_s: float = 0.0) -> list[str]:
        """One line for each failure of the job since the last call (each restarts it, the
        last one ends it), its cause in one line; the full traces go to `trace_log`.

        `retry_s`: how long to keep asking when the REST API does not answer, for the last
        call after the job ended: a short job's failures are seen there or never (a busy
        machine once let that one request time out, and a restart went unreported)."""
        deadline = time.monotonic() + retry_s
        while True:
            try:
                doc = self._get(f"/jobs/{self.job_id}/exceptions?maxExceptions=20")
                break
            except Exception:  # noqa: BLE001 - between states, or gone
                if time.monotonic() >= deadline:
                    return []
                time.sleep(0.5)
        entries = (doc.get("exceptionHistory") or {}).get("entries") or []
        lines = []
        for entry in sorted(entries, key=lambda e: e.get("timestamp", 0)):
            key = (entry.get("timestamp"), entry.get("exceptionName"), entry.get("taskName"))
            if key in self._failures_seen:
                continue
            self._failures_seen.add(key)
            trace = entry.get("stacktrace") or entry.get("exceptionName") or "?"
            cause = explain_python_error(trace) or last_cause(trace) or "?"
            cause = " ".join(cause.split())[:MAX_ERROR_CHARS]
            where = entry.get("taskName") or "the job"
            if len(where) > 80:  # a chained task's name lists every operator
                head, _, subtask = where.rpartition(" (")
                where = f"{head[:60]} ... ({subtask}" if subtask else where[:80] + " ..."
            told = ""
            if self.trace_log is not None:
                try:
                    self.trace_log.parent.mkdir(parents=True, exist_ok=True)
                    with open(self.trace_log, "a", encoding="utf-8") as log:
                        log.write(f"--- failure #{len(self._failures_seen)} in {where}\n{trace}\n")
                    told = f"; full trace in {self.trace_log}"
                except OSError:  # a read-only image: the cause line alone
                    self.trace_log = None
            lines.append(f"failure #{len(self._failures_seen)} in {where}: {cause}{told}")
        return lines

    def _get(self, path: str):
        if self.base is None:
            raise LookupError("no REST address")
        with urllib.request.urlopen(f"{self.base}{path}", timeout=2) as resp:
            return json.load(resp)

    def _post(self, path: str, body: dict):
        if self.base is None:
            raise LookupError("no REST address")
        request = urllib.request.Request(
            f"{self.base}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            return json.load(resp)

    def first_checkpoint(self) -> bool:
        """Trigger the job's first checkpoint as soon as every task runs; True once a
        checkpoint has completed (or the JobManager refuses manual checkpoints), False while
        that is still to come: call again.

        Exactly-once output becomes visible only when a checkpoint completes. The periodic
        triggers made while the tasks start (a Python stage starts its worker inside its
        task) are declined, and the next one comes an interval later: with 5 s checkpoints
        the first output waited up to 5 s after the job was ready. Our own trigger can fail
        like any checkpoint (a task restarting, a busy machine), and a job with an hour's
        interval would then show nothing for an hour: its outcome is read
        back by its request id (uncached, unlike the API's statistics) and a failed one is
        made again, a second apart."""
        job_path = f"/jobs/{self.job_id}"
        try:
            if self._trigger is not None:
                status = self._get(f"{job_path}/checkpoints/{self._trigger}")
                if (status.get("status") or {}).get("id") != "COMPLETED":
                    return False  # under way
                operation = status.get("operation") or {}
                if operation.get("checkpointId") is not None:
                    return True
                self._trigger = None
                self._next_try = time.monotonic() + 1.0
                cause = last_cause(str((operation.get("failureCause") or {}).get("stack-trace")))
                log.debug(f"the first checkpoint failed ({cause}); triggering it again")
            job = self._get(job_path)
            if job.get("state") != "RUNNING":
                return False
            for vertex in job.get("vertices", []):
                if (vertex.get("tasks") or {}).get("RUNNING", 0) < vertex.get("parallelism", 1):
                    return False
            counts = self._get(f"{job_path}/checkpoints").get("counts") or {}
            if counts.get("completed"):
                return True
            if counts.get("in_progress"):
                return False  # a periodic one: look again, it may yet be declined
        except urllib.error.HTTPError as exc:  # the job, or our trigger, not known (yet)
            self._trigger = None  # a forgotten trigger is made again
            log.debug(f"first checkpoint: HTTP {exc.code} reading the job's state")
            return False
        except Exception:  # noqa: BLE001 - not up yet, or between states
            return False
        if time.monotonic() < self._next_try:
            return False
        try:
            answer = self._post(f"{job_path}/checkpoints", {"checkpointType": "CONFIGURED"})
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:  # between states: try again
                return False
            log.debug(f"no early first checkpoint: HTTP {exc.code}")  # refused: periodic ones
            return True
        except Exception:  # noqa: BLE001 - between states: try again
            return False
        self._trigger = answer.get("request-id")
        return self._trigger is None  # nothing to follow: leave it to the periodic ones

    def completed_checkpoints(self) -> int:
        try:
            counts = self._get(f"/jobs/{self.job_id}/checkpoints")["counts"]
            self._last_checkpoints = counts["completed"]
        except Exception:  # noqa: BLE001 - the mini-cluster may be gone already
            pass
        return self._last_checkpoints

    def line(self) -> str | None:
        """One line: records in and out, what enrichment and dead letters are doing (so an
        outage shows), and checkpoints."""
        try:
            vertices = self._get(f"/jobs/{self.job_id}")["vertices"]
            totals: dict[str, int] = {}
            for vertex in vertices:
                base = f"/jobs/{self.job_id}/vertices/{vertex['id']}/subtasks/metrics"
                for name, value in metric_totals(self._get, base).items():
                    totals[name] = totals.get(name, 0) + value
            cps = self._get(f"/jobs/{self.job_id}/checkpoints")
        except Exception:  # noqa: BLE001 - the job may be between states
            return None
        latest = (cps.get("latest") or {}).get("completed") or {}
        counts = cps.get("counts", {})
        failed = (cps.get("latest") or {}).get("failed") or {}
        # Flink counts a trigger declined because tasks were not yet running (while a job
        # starts or restarts: a Python stage starts its worker inside its task) as a failed
        # checkpoint, although no checkpoint began; only those that began have an id.
        self._failed_ids.update(
            h["id"] for h in cps.get("history") or [] if h.get("status") == "FAILED"
        )
        if failed.get("id") is not None:
            self._failed_ids.add(failed["id"])
        real = min(len(self._failed_ids), counts.get("failed", 0))
        declined = counts.get("failed", 0) - real
        why_failed = ""
        if real and failed.get("failure_message"):
            why_failed = f" (last: {' '.join(failed['failure_message'].split())[:200]})"
        self._last_checkpoints = counts.get("completed", self._last_checkpoints)
        slowest = ((cps.get("summary") or {}).get("end_to_end_duration") or {}).get("max", 0)
        cp = (
            f"last checkpoint #{latest['id']} took {latest.get('end_to_end_duration', 0)} ms, "
            f"slowest {slowest} ms"
            if latest
            else "no checkpoint yet"
        )
        parts = [f"records in {totals.get('in', 0)}, out {totals.get('out', 0)}"]
        if "lookups" in totals:
            parts.append(
                f"lookups {totals['lookups']} (failed {totals.get('lookupFailures', 0)}, "
                f"retried {totals.get('retries', 0)}), "
                f"marked missing {totals.get('markedMissing', 0)}"
            )
        if "deadLetters" in totals:
            parts.append(f"dead letters {totals['deadLetters']}")
        parts.append(cp)
        if declined:
            parts.append(f"{declined} declined while tasks started")
        parts.append(
            f"checkpoints {counts.get('completed', 0)} completed, {real} failed{why_failed}"
        )
        return " | ".join(parts)


def first_checkpoint_soon(base_url: str, job_id: str, stop: threading.Event) -> threading.Thread:
    """A daemon thread that triggers a submitted job's first checkpoint as soon as its tasks
    run (ProgressMonitor.first_checkpoint), for a client that does nothing else meanwhile;
    it gives up after FIRST_CHECKPOINT_WAIT_S or when `stop` is set."""

    def watch() -> None:
        monitor = ProgressMonitor(base_url, job_id)
        deadline = time.monotonic() + FIRST_CHECKPOINT_WAIT_S
        while time.monotonic() < deadline and not stop.is_set():
            if monitor.first_checkpoint():
                return
            stop.wait(0.2)

    thread = threading.Thread(target=watch, name="first-checkpoint", daemon=True)
    thread.start()
    return thread
