"""The stages compose, and refuse what would build a wrong job, while `build` runs: a stream
of the wrong shape, a uid used twice, two exactly-once sinks sharing a transactional-id
prefix. Built on PyFlink's gateway (no job runs); the graphs are Flink's StreamGraph."""

from __future__ import annotations

import textwrap

import pytest

from pipelines import stages
from pipelines.flink.environment import create_environment
from pipelines.jobs.enrich import lookup_client
from pipelines.kafka.connectors import source_properties
from pipelines.running import registry
from pipelines.settings import FieldType, load_settings

pytestmark = pytest.mark.unit


def settings_for(job: str, *sets: str):
    return load_settings(
        job,
        overrides=["sink.dead_letter_topic=dlq", *sets],
        environ={},
        sections=registry.load(job).sections,
    ).settings


def uids(env) -> list[str]:
    graph = env._generate_stream_graph(clear_transformations=True)
    return sorted(n.getTransformationUID() for n in graph.getStreamNodes().toArray())


def test_the_module_docstring_example_builds_the_enrich_job(flink_env):
    settings = settings_for("enrich", "enrichment.operator=batched")  # as the docstring says
    env = create_environment(settings)
    example = textwrap.dedent(stages.__doc__.split("\n\n")[1])
    exec(
        example,
        {"stages": stages, "env": env, "settings": settings, "lookup_client": lookup_client},
    )  # noqa: S102
    assert {"kafka-source", "parse", "enrich", "kafka-sink", "dead-letter-sink"} <= set(uids(env))


def test_parse_twice_and_two_exactly_once_sinks_build_with_their_own_names(flink_env):
    settings = settings_for("passthrough", "parse.validate_records=true")
    env = create_environment(settings)
    raw = stages.kafka_source(env, settings)
    parsed, bad = stages.parse(raw, settings)
    strict, strict_bad = stages.parse(
        raw, settings, name="parse-strict", extra_required={"id": FieldType.INTEGER}
    )
    stages.kafka_sink(stages.records(parsed), settings)
    stages.kafka_sink(
        stages.records(strict, name="strict-records"), settings, name="strict-sink", topic="strict"
    )
    stages.dead_letter_sink(settings, bad, strict_bad)
    found = uids(env)
    assert len(found) == len(set(found))
    assert {
        "parse-strict",
        "parse-strict-batch",
        "parse-strict-dead-letters",
        "strict-records",
    } <= set(found)
    assert {"strict-sink", "Sink Committer: strict-sink", "kafka-sink"} <= set(found)


def test_a_batch_stream_handed_to_a_sink_names_the_call_that_fixes_it(flink_env):
    settings = settings_for("passthrough")
    env = create_environment(settings)
    parsed, _ = stages.parse(stages.kafka_source(env, settings), settings)
    with pytest.raises(stages.StageError) as raised:
        stages.kafka_sink(parsed, settings)
    assert str(raised.value) == (
        "kafka_sink takes Records (one JSON text record per element), got Batches (each "
        "element a batch of JSON lines): pass it through stages.records(...) first"
    )


def test_records_of_records_and_rows_to_a_sink_are_refused(flink_env):
    settings = settings_for("passthrough")
    env = create_environment(settings)
    raw = stages.kafka_source(env, settings)
    parsed, _ = stages.parse(raw, settings, name="p1")
    with pytest.raises(stages.StageError, match=r"records\(...\) takes Batches, got Records"):
        stages.records(stages.records(parsed))
    with pytest.raises(stages.StageError, match=r"kafka_sink takes Records .*, got Rows"):
        stages.kafka_sink(raw, settings)
    with pytest.raises(stages.StageError, match=r"parse takes Rows .*, got a DataStream"):
        stages.parse(raw.stream, settings)


def test_enrich_is_handed_the_shape_its_operator_needs(flink_env):
    settings = settings_for("enrich", "enrichment.operator=batched")
    env = create_environment(settings)
    parsed, _ = stages.parse(stages.kafka_source(env, settings), settings)
    with pytest.raises(stages.StageError) as raised:
        stages.enrich(stages.records(parsed), settings, lookup_client)
    assert str(raised.value).startswith(
        "enrich (enrichment.operator: batched) takes Batches (each element a batch of JSON "
        "lines), got Records"
    )
    assert str(raised.value).endswith("stages.parse_for_enrichment(raw, settings)")
    settings = settings_for("enrich")  # the flowing operator: one stage with its parse
    env = create_environment(settings)
    parsed, _ = stages.parse_for_enrichment(stages.kafka_source(env, settings), settings)
    with pytest.raises(stages.StageError) as raised:
        stages.enrich(parsed, settings, lookup_client)
    assert str(raised.value) == (
        "enrich: enrichment.operator: flowing runs as one stage with its parse (its batcher "
        "tells it when to drain): use stages.parse_and_enrich(raw, settings, lookup_client), "
        "or enrichment.operator: batched to compose parse_for_enrichment and enrich"
    )


@pytest.mark.parametrize("operator", ["batched", "flowing"])
def test_parse_and_enrich_twice_under_two_names_gives_each_its_own_uids(flink_env, operator):
    settings = settings_for("enrich", f"enrichment.operator={operator}")
    env = create_environment(settings)
    raw = stages.kafka_source(env, settings)
    dead_letters = []
    for name in ("geo", "risk"):
        out, dead = stages.parse_and_enrich(raw, settings, lookup_client, name=name)
        stages.kafka_sink(out, settings, name=f"{name}-sink", topic=name, id_suffix=f"-{name}")
        dead_letters.append(dead)
    stages.dead_letter_sink(settings, *dead_letters)
    found = uids(env)
    assert len(found) == len(set(found))
    stage = {
        "batched": ["risk-batch", "risk"],
        "flowing": ["risk-batch", "risk-flowing"],
    }
    assert {*stage[operator], "risk-records", "risk-dead-letters"} <= set(found)
    assert not {"parse", "enrich", "parse-enrich", "enriched"} & set(found)


def test_a_stage_used_twice_under_one_name_is_refused(flink_env):
    settings = settings_for("passthrough")
    env = create_environment(settings)
    raw = stages.kafka_source(env, settings)
    stages.parse(raw, settings)
    with pytest.raises(
        stages.StageError, match=r"two operators with uid 'batch': pass another name="
    ):
        stages.parse(raw, settings)


def test_two_exactly_once_sinks_sharing_a_prefix_are_refused(flink_env):
    settings = settings_for("passthrough")
    env = create_environment(settings)
    parsed, _ = stages.parse(stages.kafka_source(env, settings), settings)
    out = stages.records(parsed)
    stages.kafka_sink(out, settings, name="a", id_suffix="-x")
    with pytest.raises(stages.StageError) as raised:
        stages.kafka_sink(out, settings, name="b", id_suffix="-x", topic="other")
    prefix = f"{settings.sink.transactional_id_prefix}-x"
    assert str(raised.value) == (
        f"sinks 'a' and 'b' share the transactional-id prefix {prefix!r}: give one another "
        f"id_suffix= (exactly-once sinks sharing one fence each other)"
    )


def test_at_least_once_sinks_need_no_prefix_of_their_own(flink_env):
    settings = settings_for("passthrough", "sink.delivery=at-least-once")
    env = create_environment(settings)
    parsed, _ = stages.parse(stages.kafka_source(env, settings), settings)
    out = stages.records(parsed)
    stages.kafka_sink(out, settings, name="a", id_suffix="")
    stages.kafka_sink(out, settings, name="b", id_suffix="", topic="other")
    assert {"a", "b"} <= set(uids(env))


def test_the_source_is_sized_for_what_the_environment_was_sized_for(flink_env, monkeypatch):
    settings = settings_for("enrich", "enrichment.capacity=37")
    seen = []
    real = stages.build_source
    monkeypatch.setattr(stages, "build_source", lambda s, uses: seen.append(uses) or real(s, uses))
    for uses in ((), ("enrichment",)):
        env = create_environment(settings, uses=uses)
        stages.graph_of(env).sized_for = uses  # as pipelines.running.wiring sizes it
        stages.kafka_source(env, settings)
    assert seen == [(), ("enrichment",)]
    assert source_properties(settings, seen[1])["max.poll.records"] == "37"
    assert source_properties(settings, seen[0])["max.poll.records"] != "37"


def test_thread_mode_parses_in_column_batches_and_enriches_only_with_the_flowing_stage(flink_env):
    settings = settings_for("passthrough", "python.execution_mode=thread")
    env = create_environment(settings)
    conf = env._j_stream_execution_environment.getConfiguration().toMap()
    assert conf.get("python.execution-mode") == "thread"
    assert conf.get("python.pythonpath")  # this venv's path, for the TaskManager's pemja
    parsed, _ = stages.parse(stages.kafka_source(env, settings), settings)
    assert isinstance(parsed, stages.Batches)  # same shape as in process mode: one line each
    graph = env._generate_stream_graph(clear_transformations=False)
    [batcher] = [n for n in graph.getStreamNodes().toArray() if n.getOperatorName() == "batch"]
    operator = batcher.getOperatorFactory().getOperator().getClass().getSimpleName()
    assert operator == "ColumnBatcher"  # lists of rows do not survive: flink/rows.py column_rows
    for operator in ("batched",):
        settings = settings_for(
            "enrich", "python.execution_mode=thread", f"enrichment.operator={operator}"
        )
        env = create_environment(settings)
        with pytest.raises(stages.ConfigError) as raised:
            stages.parse_and_enrich(stages.kafka_source(env, settings), settings, lookup_client)
        assert str(raised.value) == (
            f"python.execution_mode: thread cannot run enrichment.operator: {operator} "
            f"(PyFlink runs no AsyncFunction in thread mode); allowed in thread mode: flowing"
        )
    # The flowing stage runs there, over column batches with drain markers.
    settings = settings_for("enrich", "python.execution_mode=thread")
    env = create_environment(settings)
    stages.parse_and_enrich(stages.kafka_source(env, settings), settings, lookup_client)
    graph = env._generate_stream_graph(clear_transformations=False)
    [batcher] = [n for n in graph.getStreamNodes().toArray() if n.getOperatorName() == "batch"]
    operator = batcher.getOperatorFactory().getOperator()
    assert operator.getClass().getSimpleName() == "ColumnBatcher"
    # The mode never carries over to the next environment of the same gateway.
    env = create_environment(settings_for("passthrough", "python.execution_mode=process"))
    conf = env._j_stream_execution_environment.getConfiguration().toMap()
    assert conf.get("python.execution-mode") == "process"
