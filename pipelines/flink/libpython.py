"""Thread mode's one requirement of the machine: the interpreter's shared libpython, checked
before a job starts so that a missing one is one line, not a JVM crash."""

from __future__ import annotations

import os
import subprocess
from pathlib import PurePosixPath


def embedded_python_path(python: str | None = None) -> str:
    """`python.pythonpath` for thread mode: the import path of the interpreter `python`
    names (None: this one).

    Thread mode runs the Python stages in the JVM with pemja, which starts the libpython of
    the base interpreter, not the virtualenv's: its site-packages (pemja itself, PyFlink,
    this project through its editable install's .pth) are not on the path unless handed
    over. This interpreter's path is read; another's (a cluster's TaskManagers, say
    /opt/venv/bin/python) is the site-packages of the venv it sits in, at this
    interpreter's version (a job's pickled functions need the same one on both sides)."""
    import sys

    if python is None or python == sys.executable:
        return os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return str(PurePosixPath(python).parent.parent / "lib" / version / "site-packages")


class NoSharedLibpython(Exception):
    """Thread mode cannot start on this interpreter: the message says why and what to do."""


# What pemja runs with the configured python to find the library it loads into the JVM
# (read from pemja's CommonUtils in flink-python-2.2.1.jar).
_FIND_LIBPYTHON = "from find_libpython import find_libpython;print(find_libpython())"


def check_shared_libpython(python: str | None = None) -> None:
    """Raise NoSharedLibpython when thread mode's pemja would find no shared libpython for
    `python` (None: this interpreter). Without one, pemja's System.load fails and what
    surfaces, when the first task starts, is `NoSuchFieldException: loadedLibraryNames` from
    its fallback: nothing there says that the interpreter (a Debian python3.11 without
    libpython3.11, a Python built without --enable-shared) is the cause. An interpreter not
    on this machine (a cluster's) is the cluster's to have; it is not checked here."""
    import sys

    python = python or sys.executable
    if not os.path.exists(python):
        return
    # Asked of the interpreter itself, as pemja asks it (find_libpython is pemja's
    # dependency, not this project's to import).
    result = subprocess.run(
        [python, "-c", _FIND_LIBPYTHON], capture_output=True, text=True, timeout=60
    )
    found = result.stdout.strip() if result.returncode == 0 else ""
    if found in ("", "None"):
        raise NoSharedLibpython(
            f"python.execution_mode: thread runs the Python stages inside the JVM, which "
            f"needs the shared libpython of {python}, and it has none: install it (Debian/"
            f"Ubuntu: apt-get install libpython3.11) or use a Python built with "
            f"--enable-shared, or set python.execution_mode: process"
        )
