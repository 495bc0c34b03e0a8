"""Turning a job module into a running Flink job: `job_main` (what a job module runs as
__main__, standalone or under `flink run`) and `run_local` (`pipelines run`: the local
mini-cluster, owned, stoppable, with progress lines). Loading is pipelines.running.loading,
errors pipelines.running.errors, stopping pipelines.running.stopping."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pipelines.flink import jobclient
from pipelines.flink.checkpoints import retained_checkpoints
from pipelines.flink.environment import (
    MINI_CLUSTER_ON_LOOPBACK,
    savepoint_dir,
    transactional_identity,
)
from pipelines.flink.gateway import GATEWAY_STDERR, disconnect_gateway, gateway_in_group
from pipelines.flink.jobclient import is_detached
from pipelines.flink.jobmanager import (
    DEFAULT_JOBMANAGER,
    JobManager,
    JobManagerError,
    refuse_second_copy,
)
from pipelines.flink.minicluster import mini_cluster_rest_url
from pipelines.host.loopback import PYFLINK_WORKER_POOL, bind_grpc_to_loopback
from pipelines.host.paths import local_state
from pipelines.running.errors import (
    MAX_ERROR_CHARS,
    Failure,
    JavaFailure,
    explain_java_error,
    guarded,
)
from pipelines.running.loading import job_arguments, prepare
from pipelines.running.logs import install_cli_handler
from pipelines.running.processes import PidFile, ProcessGroups
from pipelines.running.progress import FIRST_CHECKPOINT_WAIT_S, ProgressMonitor
from pipelines.running.stopping import (
    CANCEL_TIMEOUT_S,
    SAVEPOINT_TIMEOUT_S,
    StopRequested,
    StopSignals,
)
from pipelines.running.wiring import Buildable, built, check_services
from pipelines.running.worker_output import WorkerOutput, thread_errors_to, worker_log_path
from pipelines.settings import SecretMask

# What a job module may rely on (its `__main__` block); the rest serves the CLI.
__all__ = ["job_main"]

log = logging.getLogger(__name__)

# How often a local run asks for the job's failures (its progress line comes every
# `progress_every`): a restart must be seen while the mini-cluster still answers, and it
# shuts down the moment the job ends.
FAILURES_EVERY_S = 0.5


def job_main(job: Buildable, argv: list[str] | None = None) -> None:
    """What a job module runs as __main__ (`job.main()`, pipelines.running.job): works standalone
    and under `flink run`. The job's name is its module's.

    Standalone (`python -m pipelines.jobs.<job>`, the deploy image's command) it is
    `pipelines run <job>`; under `flink run` the gateway is the Flink client's.
    """
    install_cli_handler()
    parser = job_arguments(argparse.ArgumentParser(prog=f"pipelines.jobs.{job.name}"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.mask = SecretMask()

    def action() -> int:
        loaded = prepare(job, args)

        log.info(f"job {job.name} from {Path(__file__).resolve().parents[1]}")
        env = built(job, loaded.settings)
        if not args.skip_preflight:
            check_services(env, loaded.settings)
        result = env.execute(job.name)

        if is_detached(result):  # it runs on: say so, never "finished"
            log.info(
                f"job {job.name} submitted (detached) as {result.get_job_id()}; it keeps running"
            )
        else:
            log.info(f"job {job.name} finished: {result.get_job_id()}")
        return 0

    if "PYFLINK_GATEWAY_PORT" in os.environ:  # under `flink run`: the client owns the JVM
        sys.exit(guarded(action, args.mask))

    # Standalone (a container's command, `python -m`): what `pipelines run` does, so SIGINT
    # and SIGTERM (`docker stop`, Kubernetes) cancel the job, keep its last retained
    # checkpoint, and exit 0 with nothing left running.
    def standalone() -> int:
        result = run_local(job, args)
        return 0 if result.status in ("FINISHED", "CANCELED", "STOPPED") else 1

    sys.exit(guarded(standalone, args.mask))


def _owned_local_run(body: Callable[[], RunResult], job: str) -> RunResult:
    """Run `body` with stop signals handled, the JVM's process group owned, and the
    in-process Python workers' output in a log file."""
    bind_grpc_to_loopback(PYFLINK_WORKER_POOL)  # it binds [::] otherwise
    owner = ProcessGroups()
    stops = StopSignals(owner).install()
    sys.stderr = WorkerOutput(sys.stderr, worker_log_path(job))
    GATEWAY_STDERR.log_to(local_state("logs", f"{job}-jvm.log"))
    # For the rest of this process, other threads write to the worker log, not the
    # terminal: Beam's harness threads report their shutdown as the JVM goes away, after
    # this function has returned ("Multiplexer hanging up" from a dying data-plane thread,
    # "Logging client failed ... resetting" printed by its log handler). The main thread's
    # writes still reach the terminal.
    threading.excepthook = thread_errors_to(worker_log_path(job))
    try:
        with gateway_in_group(owner):
            return body()
    except Failure:
        if sys.stderr.written:
            log.info(f"Python worker output: {sys.stderr.path}")
        raise
    except Exception as exc:  # noqa: BLE001 - Py4J errors arrive as many types
        line = explain_java_error(exc)  # now: the gateway ends below
        if line is None:
            raise
        raise JavaFailure(line) from None
    finally:
        disconnect_gateway()
        owner.end()
        stops.restore()


# ------------------------------------------------------------------ local runs with progress


@dataclass
class RunResult:
    job_id: str
    status: str
    checkpoints: int


def run_local(
    job: Buildable,
    args: argparse.Namespace,
    progress_every: float = 2.0,
    extra_conf: dict[str, str] | None = None,
) -> RunResult:
    """Run a job on an in-process mini-cluster, printing progress until it ends.

    SIGINT/SIGTERM cancel the job (its last retained checkpoint stays for
    --from-checkpoint), or stop it with a savepoint under --savepoint-on-stop; in every
    phase (loading, building, submitting, starting, running, savepointing) the stop ends
    within STOP_DEADLINE_S and leaves no process behind.
    """
    state: dict = {"settings": None, "client": None}

    def body() -> RunResult:
        try:
            return _run_local(job, args, progress_every, extra_conf, state)
        except StopRequested as stop:
            client, settings = state["client"], state["settings"]
            if client is None:
                log.info(f"stopping ({stop.signame}): no job was running yet")
                return RunResult("", "STOPPED", 0)
            status = _stop(
                client,
                settings,
                getattr(args, "savepoint_on_stop", False),
                state.get("job_id", ""),
                stop.signame,
            )
            return RunResult(state.get("job_id", ""), status, 0)

    try:
        return _owned_local_run(body, job.name)
    finally:
        if state.get("registered"):
            state["registered"].unlink(missing_ok=True)
            state["registered"].with_suffix(".pid").unlink(missing_ok=True)


def _run_local(job: Buildable, args, progress_every, extra_conf, state) -> RunResult:
    loaded = prepare(job, args)
    state["settings"] = loaded.settings
    name = job.name

    extra = {
        **MINI_CLUSTER_ON_LOOPBACK,
        "metrics.fetcher.update-interval": "2 s",
        # The REST API serves a job's exceptions and checkpoints from a cache this old (3 s
        # by default): a restart near the end of a short job could be seen by no poll before
        # the job finished and its mini-cluster shut down, and go unreported.
        "web.refresh-interval": "500 ms",
        **(extra_conf or {}),
    }
    identity = transactional_identity(loaded.settings)
    runs = LocalRuns()
    runs.refuse_second_copy(name, identity)
    env = built(job, loaded.settings, extra)
    if not args.skip_preflight:
        check_services(env, loaded.settings)
    client = env.execute_async(name)
    state["client"] = client
    job_id = str(client.get_job_id())
    state["job_id"] = job_id
    try:
        url = mini_cluster_rest_url(client)
    except Exception as exc:  # noqa: BLE001 - progress is a nicety; the job runs without it
        url = None
        log.info(f"warning: no progress lines: the mini-cluster's REST address is unknown ({exc})")
    log.info(f"job {name} submitted to the local mini-cluster as {job_id} (REST/UI at {url})")
    if url:
        state["registered"] = runs.register(url, identity)

    failures_log = local_state("logs", f"{name}-failures.log")
    failures_log.unlink(missing_ok=True)  # this run's failures only
    monitor = ProgressMonitor(url, job_id, failures_log)
    outcome = client.get_job_execution_result()
    shown, shown_at, looked_at, failures_at = None, 0.0, 0.0, 0.0
    # While the tasks start, look often: the first checkpoint is triggered the moment they run.
    starting_until = time.monotonic() + FIRST_CHECKPOINT_WAIT_S if url else 0.0
    while not outcome.done():
        if time.monotonic() < starting_until and monitor.first_checkpoint():
            starting_until = 0.0
        if time.monotonic() - failures_at >= FAILURES_EVERY_S:
            failures_at = time.monotonic()
            for failure in monitor.failures():
                log.info(failure)
        if time.monotonic() - looked_at >= progress_every:
            looked_at = time.monotonic()
            line = monitor.line()
            # Print on change, and every 30 s while nothing moves (so it is seen to be alive).
            if line and (line != shown or time.monotonic() - shown_at > 30):
                log.info(line)
                shown, shown_at = line, time.monotonic()
        _wait_done(
            outcome,
            0.2 if time.monotonic() < starting_until else min(progress_every, FAILURES_EVERY_S),
        )
    for failure in monitor.failures(retry_s=10.0):  # the one that ended the job, if any
        log.info(failure)
    checkpoints = monitor.completed_checkpoints()
    try:
        outcome.result()
    except Exception as exc:  # noqa: BLE001
        why = explain_java_error(exc) or " ".join(str(exc).split())[:MAX_ERROR_CHARS]
        raise Failure(f"job {name} failed: {why}") from None
    log.info(f"job {name} finished")
    return RunResult(job_id, "FINISHED", checkpoints)


def _stop(client, settings, savepoint: bool, job_id: str, why: str) -> str:
    """Stop with a savepoint when asked, else cancel (retained checkpoints stay).
    Every step has a deadline; a savepoint that cannot finish in time is reported and the
    job is cancelled instead."""
    if savepoint:
        log.info(
            f"stopping ({why}): taking a savepoint, then stopping the job "
            f"(at most {SAVEPOINT_TIMEOUT_S:.0f} s)"
        )
        try:
            path = jobclient.stop_with_savepoint(
                client, savepoint_dir(settings), SAVEPOINT_TIMEOUT_S
            )
        except Exception as exc:  # noqa: BLE001 - timeout, job not running, Py4J
            reason = (
                "it did not complete in time"
                if jobclient.is_java_timeout(exc)
                else explain_java_error(exc) or str(exc).splitlines()[0]
            )
            log.info(f"savepoint failed: {reason}; cancelling the job instead")
        else:
            log.info(f"savepoint written to {path}")
            log.info(f"resume with: pipelines run {settings.job.name} --from-checkpoint {path}")
            log.info(f"job {settings.job.name} stopped")
            return "STOPPED"
    else:
        log.info(f"stopping ({why}): cancelling the job")
    try:
        jobclient.cancel_job(client, CANCEL_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - already ended, or the cancel hangs
        log.info(
            f"cancel did not confirm within {CANCEL_TIMEOUT_S:.0f} s "
            f"({explain_java_error(exc) or type(exc).__name__}); ending its processes"
        )
    log.info(_retained_line(settings, job_id))
    log.info(f"job {settings.job.name} canceled")
    return "CANCELED"


def _retained_line(settings, job_id: str) -> str:
    try:
        found = retained_checkpoints(settings)
    except Exception:  # noqa: BLE001 - remote storage: nothing to list here
        found = []
    mine = [p for p in found if p.parent.name == job_id]
    if not mine:
        return "this run retained no checkpoint" + (
            f"; the newest of an earlier run: {found[-1].as_uri()}" if found else ""
        )
    return f"last retained checkpoint: {mine[-1].as_uri()} (resume with --from-checkpoint latest)"


class LocalRuns:
    """The jobs this machine runs: local mini-cluster runs (each registers its REST address
    under .local/runs while it runs) and the local standalone cluster. A second copy of a
    job, with the same transactional-id prefix, is refused before it starts."""

    def __init__(self):
        self.dir = local_state("runs")

    @staticmethod
    def _holder(entry: Path):
        """The pid file beside a run's entry: the run registered is alive only while it is."""
        return PidFile(entry.with_suffix(".pid"), "pipelines", "run     ")

    def refuse_second_copy(self, job: str, prefix: str) -> None:
        addresses = [DEFAULT_JOBMANAGER]
        for entry in sorted(self.dir.glob("*.json")):
            try:
                run = json.loads(entry.read_text())
            except (OSError, ValueError):
                continue
            if self._holder(entry).live() is None:
                entry.unlink(missing_ok=True)
                continue
            addresses.append(run["url"].removeprefix("http://"))
        for address in addresses:
            try:
                refuse_second_copy(JobManager(address, timeout=3), job, prefix)
            except JobManagerError as exc:
                if "no Flink JobManager answers" in str(exc):
                    continue
                raise Failure(str(exc)) from None

    def register(self, url: str, prefix: str) -> Path | None:
        """Best effort: where this directory cannot be written (a read-only image, another
        user's checkout) the run goes on, unregistered, and says so."""
        entry = self.dir / f"{os.getpid()}.json"
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._holder(entry).write(os.getpid())
            entry.write_text(json.dumps({"url": url, "prefix": prefix}))
        except OSError as exc:
            log.info(f"warning: this run is not registered in {self.dir} ({exc.strerror})")
            return None
        return entry


def _wait_done(future, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not future.done():
        time.sleep(0.1)


def check_local(job: Buildable, args: argparse.Namespace) -> None:
    """`pipelines doctor`: the settings and preflight as a run has them, then the job built
    on a gateway this call owns (nothing is submitted) and the services its build wired
    asked whether they answer. Failure on the first problem."""

    def body() -> RunResult:
        loaded = prepare(job, args)
        check_services(built(job, loaded.settings), loaded.settings)
        return RunResult("", "CHECKED", 0)

    _owned_local_run(body, job.name)
