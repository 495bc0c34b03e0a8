"""Stop requests (SIGINT, SIGTERM) turned into one orderly stop with a deadline: the first
signal asks the run to stop, a second or the deadline ends the process group at once."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from pipelines.running.processes import ProcessGroups

log = logging.getLogger(__name__)

STOP_DEADLINE_S = 27.0  # a stop request ends the process within this, whatever happens
SAVEPOINT_TIMEOUT_S = 15.0  # then: report, cancel, name the last retained checkpoint
CANCEL_TIMEOUT_S = 6.0


class StopRequested(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived: stop the job (cancel, or savepoint when asked)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signame = signal.Signals(signum).name


class _QuietOnOurStop(logging.Filter):
    """Drops a log record whose exception is our own StopRequested.

    The stop is raised in the main thread wherever it is, often inside a Py4J call (the
    progress loop polls the JVM). Py4J's `send_command` catches KeyboardInterrupt, logs it
    with its stack trace on the root logger ("KeyboardInterrupt while sending command.")
    and raises it on: 1 stop in ~150 under load printed that trace before the orderly stop.
    The stop is ours and is reported by the runner; any other exception still logs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, StopRequested)


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
        self._previous: dict[int, signal._HANDLER] = {}
        self._done = threading.Event()
        self._quiet = _QuietOnOurStop()

    def install(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
            logging.getLogger().addFilter(self._quiet)
        return self

    def restore(self) -> None:
        """Back to the handlers we found; a pending watchdog is called off (the stop ended)."""
        self._done.set()
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
        logging.getLogger().removeFilter(self._quiet)

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
