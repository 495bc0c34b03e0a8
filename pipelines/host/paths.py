"""Where this checkout keeps things: one place, so nothing else computes a path from
`__file__`. Local state (brokers, clusters, checkpoints, logs) lives under `.local/`,
which is git-ignored and never packaged."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = PROJECT_ROOT / "conf"
JARS_DIR = PROJECT_ROOT / "jars"
LOCAL_DIR = PROJECT_ROOT / ".local"


PACKAGE_MARKER = ".pipelines-package"


def state_root() -> Path:
    """Where jobs keep checkpoints and savepoints when their config names no storage:
    $PIPELINES_STATE_DIR; else this checkout's .local/; else, in a package that
    `pipelines package` built, the user's state directory ($XDG_STATE_HOME/pipelines).
    Never inside a package: the next `package` or `submit` replaces that directory whole,
    and a running job's checkpoints went with it."""
    if os.environ.get("PIPELINES_STATE_DIR"):
        return Path(os.environ["PIPELINES_STATE_DIR"])
    if (PROJECT_ROOT / PACKAGE_MARKER).is_file():
        xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(xdg) / "pipelines"
    return LOCAL_DIR


def conf_dir() -> Path:
    """The config root: $PIPELINES_CONF_DIR, or the project's conf/."""
    return Path(os.environ.get("PIPELINES_CONF_DIR", CONF_DIR))


def local_state(*parts: str) -> Path:
    """A path under .local/ (not created)."""
    return LOCAL_DIR.joinpath(*parts)


def private_dir(path: Path) -> Path:
    """`path` made (with its parents) and readable by its owner only: a directory that may
    hold a secret (converted stores, logs of processes whose environment holds one)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def worker_log(job: str) -> Path:
    """Where a local run's Python worker output goes (see worker_output.WorkerOutput)."""
    return local_state("logs", f"{job}-python-worker.log")


def write_whole(path: Path, write: Callable[[Path], object]) -> None:
    """`write(partial)` into a file beside `path`, then renamed onto it: another process (two
    runs starting at once, a job's Python workers) sees no file or a whole one, never half."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
