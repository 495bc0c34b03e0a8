"""A job is its one declaration, `job = Job(build, sections=...)`: what it calls is learned
from what its build wires (sizing, preflight), and a module without it is not a job. Built
on a real PyFlink environment; nothing is submitted."""

from __future__ import annotations

import sys
import types

import pytest

from pipelines import stages
from pipelines.running import registry
from pipelines.running.errors import Failure
from pipelines.running.job import Job, JobError
from pipelines.running.wiring import built, check_services
from pipelines.settings import load_settings

CHECKED: list[float] = []


class RecordingClient:
    """A lookup client whose service never answers: preflight must ask it."""

    def lookup(self, record):  # pragma: no cover - the job is built, never run
        return record

    def check(self, timeout_s: float = 5.0) -> tuple[str, str]:
        CHECKED.append(timeout_s)
        return ("orders.service", "no answer from the orders service")


def recording_client(settings):
    return RecordingClient()


def build_with_lookups(env, settings):
    """A job's own build: parse_and_enrich with its own client, nothing else declared."""
    raw = stages.kafka_source(env, settings)
    enriched, dead = stages.parse_and_enrich(raw, settings, recording_client)
    stages.kafka_sink(enriched, settings)
    stages.dead_letter_sink(settings, dead)


def sizing(env) -> tuple[str, str]:
    """(bundle size, the source's max.poll.records) as the built job carries them."""
    from pyflink.util.java_utils import get_field_value

    j_env = env._j_stream_execution_environment
    bundle = j_env.getConfiguration().toMap().get("python.fn-execution.bundle.size")
    sources = {
        p.getSource()
        for t in j_env.getTransformations()
        for p in t.getTransitivePredecessors()
        if p.getClass().getSimpleName() == "SourceTransformation"
    }
    (source,) = sources
    return bundle, get_field_value(source, "props").getProperty("max.poll.records")


@pytest.fixture(scope="module")
def enrich_settings():
    return load_settings("enrich", sections=registry.load("enrich").sections, environ={}).settings


def test_a_job_that_builds_an_enrichment_stage_is_sized_for_it_and_its_client_checked(
    enrich_settings,
):
    job = Job(build_with_lookups)  # no sections, no service named anywhere
    env = built(job, enrich_settings)
    # One round of lookups: 8000 in flight per poll, bundles of 8000 / 500 batches.
    assert sizing(env) == ("16", "8000")
    CHECKED.clear()
    with pytest.raises(Failure, match=r"^preflight found 1 error\(s\); nothing was started$"):
        check_services(env, enrich_settings)
    assert CHECKED == [5.0]


@pytest.mark.parametrize("name", ["passthrough", "windowed"])
def test_a_job_without_lookups_keeps_kafka_and_flinks_defaults(name):
    settings = load_settings(
        name,
        environ={},
        overrides=["parse.validate_records=true", "sink.dead_letter_topic=dlq"]
        if name == "passthrough"
        else [],
    ).settings
    env = built(registry.load(name), settings)
    assert sizing(env) == ("1000", "500")
    check_services(env, settings)  # no service to ask


def test_the_shipped_enrich_job_is_sized_from_its_build(enrich_settings):
    assert sizing(built(registry.load("enrich"), enrich_settings)) == ("16", "8000")


def test_a_module_without_a_job_is_not_a_job(tmp_path, monkeypatch):
    (tmp_path / "orders.py").write_text("def build(env, settings): ...\n\njob = Job(build)\n")
    (tmp_path / "helper.py").write_text("def build(env, settings): ...\n")
    assert registry.names(tmp_path) == ["orders"]

    helper = types.ModuleType("pipelines.jobs.helper")
    exec("def build(env, settings): ...", helper.__dict__)
    monkeypatch.setitem(sys.modules, helper.__name__, helper)
    with pytest.raises(registry.UnknownJob) as caught:
        registry.load("helper")
    assert str(caught.value) == (
        "pipelines/jobs/helper.py is not a job: it declares no `job` (a job module ends with "
        "`job = Job(build, ...)`; jobs here: enrich, passthrough, windowed)"
    )
    helper.job = helper.build
    with pytest.raises(
        registry.UnknownJob,
        match=r"^pipelines/jobs/helper.py is not a job: its `job` is a function ",
    ):
        registry.load("helper")


def test_a_job_declared_wrongly_says_what_to_pass():
    with pytest.raises(JobError, match=r"^Job\(build\): give the function build\(env, settings\) "):
        Job("enrich")  # type: ignore[arg-type]
    with pytest.raises(JobError, match=r"^Job\(sections=...\): <class 'dict'> is not a JobSection"):
        Job(build_with_lookups, sections=(dict,))  # type: ignore[arg-type]
