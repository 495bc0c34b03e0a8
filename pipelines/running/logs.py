"""Logging: modules log to `logging.getLogger(__name__)` (under "pipelines"); the command
line installs the one handler that prints them, as plain lines on stdout. Library code
never prints, so a test, a benchmark or an embedding program decides what it sees."""

from __future__ import annotations

import logging
import sys

_HANDLER_NAME = "pipelines-cli"


def install_cli_handler(level: int = logging.INFO) -> None:
    """Print the project's log records as the CLI always has: the message alone, on
    stdout, flushed per line. Idempotent."""
    logger = logging.getLogger("pipelines")
    if any(h.get_name() == _HANDLER_NAME for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
