"""A job's one declaration, `job = Job(build, sections=(...))`, in pipelines/jobs/<name>.py:

    def build(env, settings):
        raw = stages.kafka_source(env, settings)
        ...

    job = Job(build, sections=(Pricing,))

    if __name__ == "__main__":
        job.main()

`build(env, settings)` wires the pipeline from pipelines.stages; `sections` are the job's
own settings sections (pipelines.settings.sections), loaded and checked with the project's.
Nothing else is declared: what the job calls is learned from what `build` wired (an
enrichment stage brings its lookup client, whose `check` preflight calls, and the Kafka
poll and Python bundle sizing for slow lookups; pipelines.running.wiring). The job's name
is its module's; its configuration is conf/base/<name>.yaml. `main` is what
`python -m pipelines.jobs.<name>` and `flink run --pyModule pipelines.jobs.<name>` run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipelines.running.runner import job_main
from pipelines.settings import JobSection

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment

    from pipelines.settings import Settings

__all__ = ["Build", "Job", "JobError"]

Build = Callable[["StreamExecutionEnvironment", "Settings"], None]
"""A job's pipeline: `build(env, settings)` adds its stages to `env` and returns nothing."""


class JobError(TypeError):
    """A job declared wrongly: raised where `Job(...)` is written, naming what to pass."""


@dataclass(frozen=True)
class Job:
    """A job: its pipeline and its own settings sections."""

    build: Build
    sections: tuple[type[JobSection], ...] = ()

    def __init__(self, build: Build, sections: Sequence[type[JobSection]] = ()) -> None:
        if not callable(build):
            raise JobError(
                f"Job(build): give the function build(env, settings) that wires the job's "
                f"stages, not a {type(build).__name__}"
            )
        for section in sections:
            if not (isinstance(section, type) and issubclass(section, JobSection)):
                raise JobError(
                    f"Job(sections=...): {section!r} is not a JobSection subclass "
                    f"(pipelines.settings.JobSection)"
                )
        object.__setattr__(self, "build", build)
        object.__setattr__(self, "sections", tuple(sections))

    @property
    def name(self) -> str:
        """The module's name, also when it runs as __main__ (`python -m`, `flink run
        --pyModule`)."""
        module = sys.modules[self.build.__module__]
        spec = getattr(module, "__spec__", None)
        return (spec.name if spec is not None else module.__name__).rpartition(".")[2]

    def main(self, argv: list[str] | None = None) -> None:
        """The job's command: standalone a local run (`pipelines run <name>`), under
        `flink run` a submission to that cluster. Exits with the run's status."""
        job_main(self, argv)
