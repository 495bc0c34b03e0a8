"""A job's build, run on an environment sized for what it wires.

What a job calls is learned from its build, never declared: an enrichment stage records
its lookup client on the job graph (pipelines.stages). The Kafka source is built first,
with its poll size fixed, before any later stage is known; so the build runs on an
environment sized for no service, and when it wired one (slow lookups want polls and
Python bundles sized to the lookups in flight) once more on an environment sized for it.
A build only declares operators, so running it twice starts nothing twice; the second
costs a fraction of a second.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pipelines.flink.environment import create_environment
from pipelines.kafka.preflight import Problem, has_errors, service_problems
from pipelines.running.errors import Failure
from pipelines.running.loading import Named
from pipelines.stages import JobGraph, graph_of

if TYPE_CHECKING:
    from pyflink.datastream import StreamExecutionEnvironment

    from pipelines.settings import Settings

log = logging.getLogger(__name__)


class Buildable(Named, Protocol):
    """What the runner needs of a job (pipelines.running.job.Job): its name, sections and build."""

    def build(self, env: StreamExecutionEnvironment, settings: Settings) -> None: ...


def built(
    job: Buildable,
    settings: Settings,
    extra: dict[str, str] | None = None,
    setup: Callable[[JobGraph], None] | None = None,
) -> StreamExecutionEnvironment:
    """An environment with `job` built on it, sized for the services its build wired;
    `setup` prepares each environment's job graph first (pipelines.testing)."""
    env = _build_on(job, settings, extra, setup, sized_for=())
    uses = graph_of(env).uses()
    return env if not uses else _build_on(job, settings, extra, setup, sized_for=uses)


def _build_on(job, settings, extra, setup, sized_for: tuple[str, ...]):
    env = create_environment(settings, extra, uses=sized_for)
    graph = graph_of(env)
    graph.sized_for = sized_for
    if setup is not None:
        setup(graph)
    job.build(env, settings)
    return env


def check_services(env: StreamExecutionEnvironment, settings: Settings) -> None:
    """Preflight of the services the built job calls: each enrichment stage's client is
    asked (its `check`) whether its service answers; Failure before anything starts."""
    problems: list[Problem] = []
    for factory in dict.fromkeys(graph_of(env).lookup_clients):  # each one once
        problems += service_problems(factory(settings))
    for problem in problems:
        log.info(str(problem))
    if has_errors(problems):
        raise Failure(f"preflight found {len(problems)} error(s); nothing was started")
