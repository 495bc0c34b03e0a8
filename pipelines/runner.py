"""Turning a job module into a running Flink job, the same way from every entry point.

`pipelines run` (local mini-cluster), `python -m pipelines.jobs.<job>` and `flink run
--pyModule pipelines.jobs.<job>` all go through `prepare`: settings loaded and validated,
preflight run, jars checked. Known failures end as one readable line, never a Py4J trace.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pipelines import jobs
from pipelines.jars import JarError
from pipelines.preflight import has_errors, run_preflight
from pipelines.processes import ProcessGroups
from pipelines.settings import ConfigError, Loaded, SecretMask, load_settings
from pipelines.stages import StageError

log = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2


class Failure(Exception):
    """A failure we can explain in one line."""


def job_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--env", help="config overlay: conf/<env>/<job>.yaml")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable)",
    )
    parser.add_argument("--conf-dir", help="config root (default: the project's conf/)")
    parser.add_argument(
        "--skip-preflight", action="store_true", help="start without the broker-aware checks"
    )
    parser.add_argument(
        "--from-checkpoint",
        metavar="PATH|latest",
        help="resume from a retained checkpoint or savepoint",
    )
    parser.add_argument(
        "--accept-transaction-loss",
        action="store_true",
        help="restore a checkpoint older than sink.transaction_timeout anyway (its aborted "
        "transactions' records are lost)",
    )
    return parser


def load(job: str, args: argparse.Namespace, overrides: list[str] | None = None) -> Loaded:
    """The job's settings from the layers `args` names; its secrets are learned by the
    invocation's mask (`args.mask`, see `guarded`) so no error line can show them."""
    loaded = load_settings(
        job,
        env=args.env,
        conf_dir=args.conf_dir,
        overrides=list(args.overrides or []) if overrides is None else overrides,
    )
    mask = getattr(args, "mask", None)
    if mask is not None:
        mask.learn(loaded.settings)
    return loaded


def prepare(job: str, args: argparse.Namespace) -> Loaded:
    """Load, validate and preflight the settings; raise Failure on anything that would not run."""
    overrides = list(args.overrides or [])
    loaded = load(job, args, overrides)
    if getattr(args, "from_checkpoint", None):
        from pipelines.checkpoints import resolve_checkpoint, transaction_risk

        path = resolve_checkpoint(loaded.settings, args.from_checkpoint)
        loaded = load(job, args, overrides + [f"job.from_checkpoint={path}"])
        risk = transaction_risk(loaded.settings, path)
        if risk and not getattr(args, "accept_transaction_loss", False):
            raise Failure(risk)
        if risk:
            log.info(f"warning: --accept-transaction-loss: {risk.split('. Restore anyway')[0]}")
        log.info(f"resuming from {path}")
    if not args.skip_preflight:
        preflight_job(loaded.settings, load_job(job))
    return loaded


def preflight_job(settings, module) -> None:
    """Every preflight rule for a job module (its USES and its lookup client's check); the
    problems are logged, and any error raises Failure before anything starts."""
    problems = run_preflight(
        settings, uses=jobs.uses(module), client=jobs.lookup_client(module, settings)
    )
    for problem in problems:
        log.info(str(problem))
    if has_errors(problems):
        raise Failure(
            f"preflight found {sum(p.level == 'error' for p in problems)} error(s); "
            f"nothing was started"
        )


def load_job(job: str):
    try:
        return jobs.load(job)
    except jobs.UnknownJob as exc:
        raise Failure(str(exc)) from None


def job_names() -> list[str]:
    return jobs.names()


MAX_ERROR_CHARS = 500

# PyFlink wraps a Python function's exception as
#   Exception: ('Error happens inside the class ... during handling input ...', Inner('...'))
# where the input is the record (or a whole batch): never echo it, keep the inner exception.
_PYFLINK_WRAPPED = re.compile(
    r"during handling input .*, (?P<type>[A-Za-z_][\w.]*)\((?P<quote>['\"])(?P<msg>.*?)(?P=quote)\)\)\s*$",
    re.S | re.M,
)
_PYTHON_ERROR_LINE = re.compile(
    r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Errors|Failed|Fault))"
    r": (?P<msg>.*)$"
)


def explain_python_error(text: str) -> str | None:
    """The exception a Python worker raised, from the traceback Flink forwards."""
    if "Traceback (most recent call last)" not in text:
        return None
    wrapped = list(_PYFLINK_WRAPPED.finditer(text))
    if wrapped:
        last = wrapped[-1]
        return f"{last.group('type').rsplit('.', 1)[-1]}: {last.group('msg')}"
    lines = [line.strip() for line in text.splitlines()]
    for line in reversed(lines):
        match = _PYTHON_ERROR_LINE.match(line)
        if match and not line.startswith("Exception: ('Error happens inside"):
            return line
    return None


def explain_java_error(exc: BaseException) -> str | None:
    """The root cause of a Py4J error in one line, or None when it is not one.

    Flink wraps the real reason (say NoOffsetForPartitionException) in several layers of
    JobExecutionException; the last `Caused by:` is the one a user can act on. When the
    cause is a Python function's exception, that exception (not the record it was handling).
    """
    if "py4j" not in type(exc).__module__ and "Py4J" not in type(exc).__name__:
        return None
    text = str(exc)
    line = explain_python_error(text) or _last_cause(text) or type(exc).__name__
    line = " ".join(line.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS] + " ..."


def _last_cause(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines()]
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    if causes:
        return causes[-1]
    for line in lines:
        if ("Exception" in line or "Error" in line) and not line.startswith("at "):
            return line.lstrip(": ")
    return lines[0] if lines else None


def guarded(action: Callable[[], int], mask: SecretMask | None = None) -> int:
    """Run `action`, turning known failures into one line on stderr and exit code 2.
    The secret values of every config loaded through `load` with this `mask` are masked
    in that line."""
    from confluent_kafka import KafkaException

    from pipelines.jobmanager import JobManagerError
    from pipelines.kafka_clients import BrokerUnreachable

    mask_text = mask or SecretMask()

    try:
        return action()
    except (ConfigError, JarError, Failure, BrokerUnreachable, JobManagerError, StageError) as exc:
        print(mask_text(f"error: {exc}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KafkaException as exc:  # a Kafka call failed after the broker was reached
        error = exc.args[0] if exc.args else exc
        text = error.str() if hasattr(error, "str") else str(error)
        print(mask_text(f"error: Kafka: {text}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - Py4J errors arrive as many types
        line = explain_java_error(exc)
        if line is None:
            raise
        print(mask_text(f"error: {line}"), file=sys.stderr)
        return 1


def job_main(build, argv: list[str] | None = None) -> None:
    """What a job module runs as __main__: works standalone and under `flink run`. The
    job's name is its module's.

    Standalone (`python -m pipelines.jobs.<job>`, the deploy image's command) it is
    `pipelines run <job>`; under `flink run` the gateway is the Flink client's.
    """
    from pipelines.logs import install_cli_handler

    install_cli_handler()
    job = jobs.name_of(build)
    parser = job_arguments(argparse.ArgumentParser(prog=f"pipelines.jobs.{job}"))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.mask = SecretMask()

    def action() -> int:
        loaded = prepare(job, args)
        from pipelines.environment import create_environment

        log.info(f"job {job} from {Path(__file__).resolve().parent}")
        env = create_environment(loaded.settings, uses=jobs.uses(load_job(job)))
        build(env, loaded.settings)
        result = env.execute(job)
        from pipelines.flink_compat import is_detached

        if is_detached(result):  # it runs on: say so, never "finished"
            log.info(f"job {job} submitted (detached) as {result.get_job_id()}; it keeps running")
        else:
            log.info(f"job {job} finished: {result.get_job_id()}")
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


# ------------------------------------------------------------------ stopping

STOP_DEADLINE_S = 27.0  # a stop request ends the process within this, whatever happens
SAVEPOINT_TIMEOUT_S = 15.0  # then: report, cancel, name the last retained checkpoint
CANCEL_TIMEOUT_S = 6.0


class StopRequested(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: stop the job (cancel, or savepoint when asked)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signame = signal.Signals(signum).name


class StopSignals:
    """Our own SIGINT and SIGTERM handlers, installed whatever dispositions we inherited.

    A process started in the background of a non-interactive shell inherits SIGINT as
    ignored, and Python then installs no KeyboardInterrupt handler: Ctrl-C (or `kill -INT`
    from a test or a CI runner) did nothing at all. SIGTERM (Kubernetes, systemd, `timeout`)
    killed the CLI without cancelling the job. Here both raise StopRequested in the main
    thread; a watchdog bounds the graceful stop, and a second signal exits at once. Either
    way the owned process groups (the JVM and its Python workers) are ended.
    """

    def __init__(self, owner: ProcessGroups, deadline_s: float = STOP_DEADLINE_S):
        self.owner = owner
        self.deadline_s = deadline_s
        self.requested: str | None = None
        self._previous: dict[int, object] = {}
        self._done = threading.Event()

    def install(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        """Back to the handlers we found; a pending watchdog is called off (the stop ended)."""
        self._done.set()
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is None:
            self.requested = name
            threading.Thread(target=self._watchdog, name="stop-watchdog", daemon=True).start()
            raise StopRequested(signum)
        self._force(f"{name} again: exiting now", 130)

    def _watchdog(self) -> None:
        if self._done.wait(self.deadline_s):
            return
        self._force(
            f"the stop did not finish within {self.deadline_s:.0f} s: killing the job's processes",
            1,
        )

    def _force(self, message: str, code: int) -> None:
        try:
            print(message, file=sys.__stderr__, flush=True)
        finally:
            self.owner.end(grace_s=1.0)
            os._exit(code)


class WorkerOutput(io.TextIOBase):
    """sys.stderr for a local run: the main thread's writes reach the terminal, other
    threads' go to a log file. Locally PyFlink runs Python functions in this process
    (loopback), and Beam's SDK harness prints every failing bundle's traceback, records
    included, to sys.stderr from its threads: thousands of lines for one error that the
    CLI reports in one line anyway."""

    def __init__(self, terminal, path: Path):
        self.terminal = terminal
        self.path = path
        self._file = None

    def write(self, text: str) -> int:
        if threading.current_thread() is threading.main_thread():
            return self.terminal.write(text)
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "w", encoding="utf-8", errors="replace")
                self.path.chmod(0o600)  # records may be in it
            self._file.write(text)
            self._file.flush()
        except OSError:  # a read-only image: the terminal, rather than nowhere
            return self.terminal.write(text)
        return len(text)

    def flush(self) -> None:
        self.terminal.flush()

    @property
    def written(self) -> bool:
        return self._file is not None


def _to_log(path: Path):
    def excepthook(args) -> None:
        import traceback

        if args.exc_type is SystemExit:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8", errors="replace") as log:
                name = args.thread.name if args.thread is not None else "?"
                log.write(f"Exception in thread {name}:\n")
                traceback.print_exception(
                    args.exc_type, args.exc_value, args.exc_traceback, file=log
                )
        except OSError:  # a read-only image: Python's own report, rather than nothing
            threading.__excepthook__(args)

    return excepthook


def worker_log_path(job: str) -> Path:
    from pipelines.paths import worker_log

    return worker_log(job)


def _owned_local_run(body: Callable[[], RunResult], job: str) -> RunResult:
    """Run `body` with stop signals handled, the JVM's process group owned, and the
    in-process Python workers' output in a log file."""
    from pipelines.flink_compat import GATEWAY_STDERR, disconnect_gateway, gateway_in_group
    from pipelines.loopback import PYFLINK_WORKER_POOL, bind_grpc_to_loopback
    from pipelines.paths import local_state

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
    threading.excepthook = _to_log(worker_log_path(job))
    try:
        with gateway_in_group(owner):
            return body()
    except Failure:
        if sys.stderr.written:
            log.info(f"Python worker output: {sys.stderr.path}")
        raise
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
    job: str,
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
        return _owned_local_run(body, job)
    finally:
        if state.get("registered"):
            state["registered"].unlink(missing_ok=True)
            state["registered"].with_suffix(".pid").unlink(missing_ok=True)


def _run_local(job, args, progress_every, extra_conf, state) -> RunResult:
    loaded = prepare(job, args)
    state["settings"] = loaded.settings
    module = load_job(job)
    from pipelines.environment import (
        MINI_CLUSTER_ON_LOOPBACK,
        create_environment,
        transactional_identity,
    )
    from pipelines.flink_compat import mini_cluster_rest_url

    extra = {
        **MINI_CLUSTER_ON_LOOPBACK,
        "metrics.fetcher.update-interval": "2 s",
        **(extra_conf or {}),
    }
    identity = transactional_identity(loaded.settings)
    runs = LocalRuns()
    runs.refuse_second_copy(job, identity)
    env = create_environment(loaded.settings, extra, uses=jobs.uses(module))
    module.build(env, loaded.settings)
    client = env.execute_async(job)
    state["client"] = client
    job_id = str(client.get_job_id())
    state["job_id"] = job_id
    try:
        url = mini_cluster_rest_url(client)
    except Exception as exc:  # noqa: BLE001 - progress is a nicety; the job runs without it
        url = None
        log.info(f"warning: no progress lines: the mini-cluster's REST address is unknown ({exc})")
    log.info(f"job {job} submitted to the local mini-cluster as {job_id} (REST/UI at {url})")
    if url:
        state["registered"] = runs.register(url, identity)
    from pipelines.paths import local_state

    failures_log = local_state("logs", f"{job}-failures.log")
    failures_log.unlink(missing_ok=True)  # this run's failures only
    monitor = ProgressMonitor(url, job_id, failures_log)
    outcome = client.get_job_execution_result()
    shown, shown_at = None, 0.0
    while not outcome.done():
        for failure in monitor.failures():
            log.info(failure)
        line = monitor.line()
        # Print on change, and every 30 s while nothing moves (so it is seen to be alive).
        if line and (line != shown or time.monotonic() - shown_at > 30):
            log.info(line)
            shown, shown_at = line, time.monotonic()
        _wait_done(outcome, progress_every)
    for failure in monitor.failures():  # the one that ended the job, if any
        log.info(failure)
    checkpoints = monitor.completed_checkpoints()
    try:
        outcome.result()
    except Exception as exc:  # noqa: BLE001
        why = explain_java_error(exc) or " ".join(str(exc).split())[:MAX_ERROR_CHARS]
        raise Failure(f"job {job} failed: {why}") from None
    log.info(f"job {job} finished")
    return RunResult(job_id, "FINISHED", checkpoints)


def _stop(client, settings, savepoint: bool, job_id: str, why: str) -> str:
    """Stop with a savepoint when asked, else cancel (retained checkpoints stay).
    Every step has a deadline; a savepoint that cannot finish in time is reported and the
    job is cancelled instead."""
    from pipelines import flink_compat

    if savepoint:
        from pipelines.environment import savepoint_dir

        log.info(
            f"stopping ({why}): taking a savepoint, then stopping the job "
            f"(at most {SAVEPOINT_TIMEOUT_S:.0f} s)"
        )
        try:
            path = flink_compat.stop_with_savepoint(
                client, savepoint_dir(settings), SAVEPOINT_TIMEOUT_S
            )
        except Exception as exc:  # noqa: BLE001 - timeout, job not running, Py4J
            reason = (
                "it did not complete in time"
                if flink_compat.is_java_timeout(exc)
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
        flink_compat.cancel_job(client, CANCEL_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - already ended, or the cancel hangs
        log.info(
            f"cancel did not confirm within {CANCEL_TIMEOUT_S:.0f} s "
            f"({explain_java_error(exc) or type(exc).__name__}); ending its processes"
        )
    log.info(_retained_line(settings, job_id))
    log.info(f"job {settings.job.name} canceled")
    return "CANCELED"


def _retained_line(settings, job_id: str) -> str:
    from pipelines.checkpoints import retained_checkpoints

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
        from pipelines.paths import local_state

        self.dir = local_state("runs")

    @staticmethod
    def _holder(entry: Path):
        """The pid file beside a run's entry: the run registered is alive only while it is."""
        from pipelines.processes import PidFile

        return PidFile(entry.with_suffix(".pid"), "pipelines", "run     ")

    def refuse_second_copy(self, job: str, prefix: str) -> None:
        from pipelines.jobmanager import (
            DEFAULT_JOBMANAGER,
            JobManager,
            JobManagerError,
            refuse_second_copy,
        )

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


class ProgressMonitor:
    """Records in/out and the last checkpoint, read from the job's REST API."""

    def __init__(self, base_url: str | None, job_id: str, trace_log: Path | None = None):
        self.base = base_url
        self.job_id = job_id
        self.trace_log = trace_log
        self._last_checkpoints = 0
        self._failures_seen: set[tuple] = set()

    def failures(self) -> list[str]:
        """One line for each failure of the job since the last call (each restarts it, the
        last one ends it), its cause in one line; the full traces go to `trace_log`."""
        try:
            doc = self._get(f"/jobs/{self.job_id}/exceptions?maxExceptions=20")
        except Exception:  # noqa: BLE001 - between states, or gone
            return []
        entries = (doc.get("exceptionHistory") or {}).get("entries") or []
        lines = []
        for entry in sorted(entries, key=lambda e: e.get("timestamp", 0)):
            key = (entry.get("timestamp"), entry.get("exceptionName"), entry.get("taskName"))
            if key in self._failures_seen:
                continue
            self._failures_seen.add(key)
            trace = entry.get("stacktrace") or entry.get("exceptionName") or "?"
            cause = explain_python_error(trace) or _last_cause(trace) or "?"
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
        from pipelines.flink_compat import metric_totals

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
        why_failed = ""
        if counts.get("failed") and failed.get("failure_message"):
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
        parts += [
            cp,
            f"checkpoints {counts.get('completed', 0)} completed, {counts.get('failed', 0)} failed"
            f"{why_failed}",
        ]
        return " | ".join(parts)
