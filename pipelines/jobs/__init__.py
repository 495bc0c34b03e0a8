"""The jobs, found by discovery: every module in this package (its name not starting with
`_`) is one job, named by its module. The CLI, `pipelines-dev new` and `pipelines package`
all read this one list.

A job module holds:
- `build(env, settings)`: the pipeline, in pipelines.stages builders;
- `USES` (optional): the external services it calls, e.g. ("enrichment",): preflight
  checks that each answers, and lookups size Kafka polls and Python bundles;
- `SECTIONS` (optional): the job's own settings sections, each a JobSection subclass
  (pipelines.settings.sections) read with `Model.of(settings)`;
- `lookup_client(settings)` (jobs with an enrichment stage): the client factory handed to
  `stages.enrich`; preflight asks that client's `check` whether the service answers;
- `if __name__ == "__main__": job_main(build)`, so that `python -m pipelines.jobs.NAME` and
  `flink run --pyModule pipelines.jobs.NAME` run it.
Its configuration is conf/base/NAME.yaml.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment

    from pipelines.lookups import EnrichmentClient
    from pipelines.settings import Settings

__all__ = [
    "Build",
    "JobModule",
    "UnknownJob",
    "load",
    "lookup_client",
    "name_of",
    "names",
    "sections",
    "uses",
]

Build = Callable[["StreamExecutionEnvironment", "Settings"], None]
"""A job's pipeline: `build(env, settings)` adds its stages to `env` and returns nothing."""


class JobModule(Protocol):
    """The contract of a job module (the module docstring says what each part is for).
    `USES` and `lookup_client` are optional: `uses` and `lookup_client` below read them."""

    def build(self, env: StreamExecutionEnvironment, settings: Settings) -> None: ...


NAME = re.compile(r"[a-z][a-z0-9_]*")
JOBS_DIR = Path(__file__).resolve().parent


class UnknownJob(LookupError):
    """No job module by that name; the message lists the jobs there are."""


def names(jobs_dir: Path = JOBS_DIR) -> list[str]:
    """The jobs in `jobs_dir` (this package by default), without importing them."""
    return sorted(p.stem for p in jobs_dir.glob("*.py") if NAME.fullmatch(p.stem))


def load(name: str) -> ModuleType:
    if not NAME.fullmatch(name):
        raise UnknownJob(
            f"no job named {name!r}: a job is a module pipelines/jobs/<name>.py, its "
            f"name lowercase letters, digits and _ (jobs here: {', '.join(names())})"
        )
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name in (f"{__name__}.{name}", __name__):
            raise UnknownJob(
                f"no job named {name!r} (no module pipelines/jobs/{name}.py; jobs "
                f"here: {', '.join(names())})"
            ) from None
        raise


def name_of(build: Callable[..., Any]) -> str:
    """A job's name, from the module its `build` is defined in (also when that module runs
    as __main__ under `python -m` or `flink run --pyModule`)."""
    module = sys.modules[build.__module__]
    spec = getattr(module, "__spec__", None)
    return (spec.name if spec is not None else module.__name__).rpartition(".")[2]


def uses(module: ModuleType) -> tuple[str, ...]:
    return tuple(getattr(module, "USES", ()))


def sections(module: ModuleType) -> tuple[Any, ...]:
    """The job's own settings sections (its SECTIONS), for the loader."""
    return tuple(getattr(module, "SECTIONS", ()))


def lookup_client(module: ModuleType, settings: Settings) -> EnrichmentClient | None:
    """The job's enrichment client, if it has one (for preflight), else None."""
    factory = getattr(module, "lookup_client", None)
    return factory(settings) if callable(factory) else None
