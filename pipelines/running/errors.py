"""Known failures as one readable line and an exit code, never a Py4J or Python trace:
`guarded` runs a command and turns what it raises into `error: ...` on stderr (secrets
masked); `explain_*` find the one line worth showing in a Java or PyFlink error."""

from __future__ import annotations

import logging
import re
import sys
from typing import Callable

from pipelines.flink.jobmanager import JobManagerError
from pipelines.flink.libpython import NoSharedLibpython
from pipelines.host.jars import JarError
from pipelines.kafka.clients import BrokerUnreachable
from pipelines.settings import ConfigError, SecretMask
from pipelines.stages import StageError

log = logging.getLogger(__name__)

EXIT_BAD_INPUT = 2


class Failure(Exception):
    """A failure we can explain in one line."""


class JavaFailure(Exception):
    """A Py4J error already read into its one line while the JVM still answered: a run that
    ends its own gateway (runner._owned_local_run) reads the error before the gateway goes,
    since a Py4JJavaError asks the JVM for its text only when printed."""


MAX_ERROR_CHARS = 500

# PyFlink wraps a Python function's exception as
#   Exception: ('Error happens inside the class ... during handling input ...', Inner('...'))
# where the input is the record (or a whole batch): never echo it, keep the inner exception.
_PYFLINK_WRAPPED = re.compile(
    r"during handling input .*, (?P<type>[A-Za-z_][\w.]*)\((?P<quote>['\"])(?P<msg>.*?)(?P=quote)\)\)\s*$",
    re.S | re.M,
)
# Thread mode (pemja) raises a Python exception into the JVM as
#   pemja.core.PythonException: <class 'pipelines.lookups.EnrichmentFailed'>: message
_PEMJA_WRAPPED = re.compile(
    r"^pemja\.core\.PythonException: <class '(?P<type>[\w.]+)'>: (?P<msg>.*)$", re.S
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
            # The class's own name, as the wrapped form gives it (a traceback qualifies it
            # with its module: pipelines.lookups.EnrichmentFailed).
            return f"{match.group('type').rsplit('.', 1)[-1]}: {match.group('msg')}"
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
    line = explain_python_error(text) or last_cause(text) or type(exc).__name__
    line = " ".join(line.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS] + " ..."


def last_cause(text: str) -> str | None:
    """The last `Caused by:` (or the first line that names an error), a Python exception
    raised in thread mode as the worker's traceback would name it."""
    line = _last_cause_line(text)
    pemja = _PEMJA_WRAPPED.match(line) if line else None
    if pemja:
        return f"{pemja.group('type').rsplit('.', 1)[-1]}: {pemja.group('msg')}"
    return line


def _last_cause_line(text: str) -> str | None:
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

    mask_text = mask or SecretMask()

    try:
        return action()
    except (
        ConfigError,
        JarError,
        Failure,
        BrokerUnreachable,
        JobManagerError,
        StageError,
        NoSharedLibpython,
    ) as exc:
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
    except JavaFailure as exc:
        print(mask_text(f"error: {exc}"), file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - Py4J errors arrive as many types
        line = explain_java_error(exc)
        if line is None:
            raise
        print(mask_text(f"error: {line}"), file=sys.stderr)
        return 1
