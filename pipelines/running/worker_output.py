"""Where a local run's in-process Python workers write: the main thread's output reaches
the terminal, the workers' goes to a log file (a worker's traceback is not the user's)."""

from __future__ import annotations

import io
import logging
import threading
from pathlib import Path
from typing import TextIO

from pipelines.host.paths import worker_log

log = logging.getLogger(__name__)


class WorkerOutput(io.TextIOBase):
    """sys.stderr for a local run: the main thread's writes reach the terminal, other
    threads' go to a log file. Locally PyFlink runs Python functions in this process
    (loopback), and Beam's SDK harness prints every failing bundle's traceback, records
    included, to sys.stderr from its threads: thousands of lines for one error that the
    CLI reports in one line anyway."""

    def __init__(self, terminal, path: Path):
        self.terminal = terminal
        self.path = path
        self._file: TextIO | None = None

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


def thread_errors_to(path: Path):
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
    return worker_log(job)
