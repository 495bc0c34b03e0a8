"""A Flink JobManager's REST API, for what an operator does around a job: list jobs, stop one
with a savepoint, cancel one, and find the running copy of a job before starting another.

Every job this project starts carries its name and its sink's transactional-id prefix as
global job parameters (environment.flink_configuration), which `/jobs/<id>/config` shows:
two running jobs with one prefix fence each other's producers and duplicate output, so
`run` and `submit` ask here first. Stdlib HTTP only: this runs on a machine that submits
jobs, with nothing else installed.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import unquote

JOB_PARAMETER = "pipelines.job"
PREFIX_PARAMETER = "pipelines.transactional-id-prefix"
SAVEPOINT_PARAMETER = "pipelines.savepoint-dir"
DEFAULT_JOBMANAGER = f"127.0.0.1:{os.environ.get('PIPELINES_FLINK_REST_PORT', '8081')}"
ACTIVE = ("INITIALIZING", "CREATED", "RUNNING", "RESTARTING", "FAILING", "CANCELLING")
HOST_PORT = re.compile(r"[A-Za-z0-9](?:[\w.-]*[A-Za-z0-9])?:\d{1,5}")


class JobManagerError(Exception):
    """The JobManager cannot be reached or refused a request; the message says which."""


def check_address(jobmanager: str, what: str = "--jobmanager") -> str:
    if not HOST_PORT.fullmatch(jobmanager) or not 0 < int(jobmanager.rsplit(":", 1)[1]) < 65536:
        raise JobManagerError(f"{what} {jobmanager!r}: expected HOST:PORT, e.g. flink-jm:8081")
    return jobmanager


@dataclass(frozen=True)
class FlinkJob:
    id: str
    name: str
    state: str
    start_time: int
    prefix: str | None = None  # the sink's transactional-id prefix, for jobs of this project
    job: str | None = None  # the project's job name, for jobs of this project
    savepoint_dir: str | None = None  # where the job's config puts savepoints

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


class JobManager:
    def __init__(self, address: str = DEFAULT_JOBMANAGER, timeout: float = 10.0):
        self.address = check_address(address)
        self.url = f"http://{self.address}"
        self.timeout = timeout

    def _call(self, path: str, method: str = "GET", body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                text = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            try:
                detail = "; ".join(json.loads(detail).get("errors", [detail]))
            except (ValueError, AttributeError):
                pass
            first = detail.strip().splitlines()[0] if detail.strip() else exc.reason
            raise JobManagerError(f"{method} {self.url}{path}: HTTP {exc.code}: {first}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise JobManagerError(
                f"no Flink JobManager answers at {self.url}: is it running? "
                f"({getattr(exc, 'reason', exc)})"
            ) from None
        return json.loads(text) if text.strip() else {}

    def answers(self) -> bool:
        try:
            self._call("/overview")
        except JobManagerError:
            return False
        return True

    def jobs(self) -> list[FlinkJob]:
        found = []
        for entry in self._call("/jobs/overview")["jobs"]:
            params: dict = {}
            if entry["state"] in ACTIVE:
                try:
                    config = self._call(f"/jobs/{entry['jid']}/config")
                    params = (config.get("execution-config") or {}).get("user-config") or {}
                except JobManagerError:  # the job ended between the two calls
                    params = {}
            found.append(
                FlinkJob(
                    id=entry["jid"],
                    name=entry["name"],
                    state=entry["state"],
                    start_time=entry.get("start-time", 0),
                    prefix=_decoded(params.get(PREFIX_PARAMETER)),
                    job=_decoded(params.get(JOB_PARAMETER)),
                    savepoint_dir=_decoded(params.get(SAVEPOINT_PARAMETER)),
                )
            )
        return sorted(found, key=lambda j: j.start_time)

    def running_copies(self, prefix: str) -> list[FlinkJob]:
        """Active jobs whose sinks use `prefix`: a second one would fence the first's
        producers and duplicate output."""
        return [j for j in self.jobs() if j.active and j.prefix == prefix]

    def find(self, wanted: str) -> FlinkJob:
        """A job by id, or the one active job of that name or transactional-id prefix."""
        jobs = self.jobs()
        by_id = [j for j in jobs if j.id == wanted]
        if by_id:
            return by_id[0]
        named = [j for j in jobs if j.active and wanted in (j.job, j.name, j.prefix)]
        if len(named) == 1:
            return named[0]
        if not named:
            raise JobManagerError(f"no job {wanted!r} is running at {self.url}")
        raise JobManagerError(
            f"{len(named)} jobs named {wanted!r} run at {self.url}: give the id "
            f"({', '.join(j.id for j in named)})"
        )

    def cancel(self, job_id: str, wait_s: float = 60.0) -> str:
        self._call(f"/jobs/{job_id}?mode=cancel", method="PATCH")
        return self._wait_state(job_id, ("CANCELED", "FAILED", "FINISHED"), wait_s)

    def stop_with_savepoint(self, job_id: str, directory: str | None, wait_s: float = 120.0) -> str:
        """Stop the job with a savepoint (no drain) and return the savepoint's location."""
        body: dict = {"drain": False}
        if directory:
            body["targetDirectory"] = directory
        deadline = time.monotonic() + wait_s
        trigger = self._call(f"/jobs/{job_id}/stop", method="POST", body=body)["request-id"]
        while time.monotonic() < deadline:
            status = self._call(f"/jobs/{job_id}/savepoints/{trigger}")
            if status["status"]["id"] == "COMPLETED":
                operation = status.get("operation") or {}
                if "location" in operation:
                    self._wait_state(job_id, ("FINISHED", "CANCELED", "FAILED"), 30)
                    return operation["location"]
                cause = _first_cause((operation.get("failure-cause") or {}).get("stack-trace", ""))
                if "Not all required tasks are currently running" not in cause:
                    raise JobManagerError(f"the savepoint of job {job_id} failed: {cause}")
                # A job still deploying (or restarting) takes no savepoint yet: ask again.
                time.sleep(1.0)
                again = self._call(f"/jobs/{job_id}/stop", method="POST", body=body)
                trigger = again["request-id"]
                continue
            time.sleep(0.5)
        raise JobManagerError(
            f"the savepoint of job {job_id} did not complete within {wait_s:.0f} s; "
            f"the job still runs"
        )

    def _wait_state(self, job_id: str, states: tuple[str, ...], wait_s: float) -> str:
        deadline = time.monotonic() + wait_s
        state = ""
        while time.monotonic() < deadline:
            state = self._call(f"/jobs/{job_id}")["state"]
            if state in states:
                return state
            time.sleep(0.3)
        raise JobManagerError(f"job {job_id} is still {state} after {wait_s:.0f} s")


def _decoded(value: str | None) -> str | None:
    return unquote(value) if value is not None else None


def _first_cause(stack_trace: str) -> str:
    causes = [
        line.strip().removeprefix("Caused by: ")
        for line in stack_trace.splitlines()
        if line.strip().startswith("Caused by: ")
    ]
    if causes:
        return causes[-1]
    return stack_trace.strip().splitlines()[0] if stack_trace.strip() else "no reason given"


def refuse_second_copy(jobmanager: JobManager, job: str, prefix: str) -> None:
    """Raise when a job with this transactional-id prefix is active on the JobManager."""
    running = jobmanager.running_copies(prefix)
    if running:
        other = running[0]
        raise JobManagerError(
            f"job {job}: {other.name} ({other.id}) is {other.state} at {jobmanager.url} with "
            f"the same sink.transactional_id_prefix {prefix!r}; a second copy would fence its "
            f"producers and duplicate output. Stop it first: pipelines jobs stop {other.id} "
            f"--jobmanager {jobmanager.address}"
        )
