"""The list of jobs: every module of pipelines/jobs whose name is lowercase letters, digits
and `_` and that declares `job = Job(...)` (pipelines.running.job) is one job, named by its
module. The CLI, `pipelines-dev new`, `pipelines package` and pipelines.testing read this
one list; a module there without the declaration is a helper, not a job. Its configuration
is conf/base/<name>.yaml.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from pipelines.running.errors import Failure
from pipelines.running.job import Job

__all__ = ["UnknownJob", "load", "names"]

NAME = re.compile(r"[a-z][a-z0-9_]*")
JOBS_DIR = Path(__file__).resolve().parents[1] / "jobs"
PACKAGE = "pipelines.jobs"
DECLARATION = "job = Job(build, ...)"


class UnknownJob(Failure):
    """No job by that name; its one line says why and lists the jobs there are."""


def declares_job(path: Path) -> bool:
    """Whether a module's source assigns `job` at its top level (read, not imported, so
    that listing the jobs starts none of them); `load` checks what it holds."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return True  # listed, so that `load` reports the real problem
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == "job" for t in targets):
            return True
    return False


def names(jobs_dir: Path = JOBS_DIR) -> list[str]:
    """The jobs in `jobs_dir` (this package by default), without importing them."""
    return sorted(
        p.stem for p in jobs_dir.glob("*.py") if NAME.fullmatch(p.stem) and declares_job(p)
    )


def load(name: str) -> Job:
    """The job `name` declares, imported; UnknownJob, in one line, if there is none."""
    here = f"jobs here: {', '.join(names()) or 'none'}"
    if not NAME.fullmatch(name):
        raise UnknownJob(
            f"no job named {name!r}: a job is a module pipelines/jobs/<name>.py, its "
            f"name lowercase letters, digits and _ ({here})"
        )
    try:
        module = importlib.import_module(f"{PACKAGE}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name in (f"{PACKAGE}.{name}", PACKAGE):
            raise UnknownJob(
                f"no job named {name!r} (no module pipelines/jobs/{name}.py; {here})"
            ) from None
        raise
    job = vars(module).get("job")
    if not isinstance(job, Job):
        found = "it declares no `job`" if job is None else f"its `job` is a {type(job).__name__}"
        raise UnknownJob(
            f"pipelines/jobs/{name}.py is not a job: {found} (a job module ends with "
            f"`{DECLARATION}`; {here})"
        )
    return job
