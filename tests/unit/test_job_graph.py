"""Every operator of every job has a name and a uid, and the uids are these.

A savepoint maps its state to operators by uid: an operator without one gets a hash of the
graph's shape, which changes with the next edit of the job, and a renamed uid orphans its
state (the restore then fails, or drops state with --allowNonRestoredState). So the uids
are pinned here; changing one is a decision, made by editing this list. The graphs are
Flink's own StreamGraph, built by each job's `build` on the gateway (no job runs)."""

from __future__ import annotations

import importlib

import pytest

from pipelines.flink.environment import create_environment
from pipelines.running import registry
from pipelines.settings import load_settings

pytestmark = pytest.mark.unit

SINK = ["kafka-sink", "Sink Committer: kafka-sink"]
DEAD = ["dead-letter-sink", "Sink Committer: dead-letter-sink"]
# The parse stage: records parsed in batches (python.batch_size)
PARSE = ["kafka-source", "parse", "parse-dead-letters", "batch"]

CASES = {
    "passthrough": ("passthrough", [], ["kafka-source", *SINK]),
    "passthrough validating": (
        "passthrough",
        ["parse.validate_records=true", "sink.dead_letter_topic=dlq"],
        [*PARSE, "records", *SINK, *DEAD],
    ),
    "enrich": (
        "enrich",
        ["sink.dead_letter_topic=dlq"],
        # The flowing stage (the default): named parse-enrich, its uid its own, so that a
        # savepoint of the batched stage (batches in flight) is never restored into it.
        [
            "kafka-source",
            "batch",
            "parse-enrich-flowing",
            "enriched",
            "enrich-dead-letters",
            *SINK,
            *DEAD,
        ],  # fmt: skip
    ),
    "enrich batched": (
        "enrich",
        ["sink.dead_letter_topic=dlq", "enrichment.operator=batched"],
        # One Python stage parses and looks up (stages.parse_and_enrich): its own uid.
        ["kafka-source", "batch", "parse-enrich", "enriched", "enrich-dead-letters", *SINK, *DEAD],
    ),
    "windowed": (
        "windowed",
        ["sink.dead_letter_topic=dlq", "window.late_topic=late"],
        [
            *PARSE,
            "records",
            "event-time",
            "count-per-window",
            "late-record",
            *SINK,
            "late-sink",
            "Sink Committer: late-sink",
            *DEAD,
        ],
    ),
}


def operators(job: str, sets: list[str]) -> list[tuple[str, str | None]]:
    settings = load_settings(
        job, overrides=sets, environ={}, sections=registry.load(job).sections
    ).settings
    env = create_environment(settings)
    importlib.import_module(f"pipelines.jobs.{job}").build(env, settings)
    graph = env._generate_stream_graph(clear_transformations=True)
    return [
        (n.getOperatorName(), n.getTransformationUID()) for n in graph.getStreamNodes().toArray()
    ]


@pytest.mark.parametrize("case", CASES)
def test_every_operator_has_a_name_and_its_pinned_uid(flink_env, case):
    job, sets, uids = CASES[case]
    found = operators(job, sets)
    unnamed = [(name, uid) for name, uid in found if uid is None or name in PYFLINK_DEFAULTS]
    assert unnamed == [], f"operators without a name or uid: {unnamed}"
    assert sorted(uid for _, uid in found) == sorted(uids)


# The names PyFlink gives an operator nobody named.
PYFLINK_DEFAULTS = {"Map", "FlatMap", "Filter", "Process", "KeyedProcess", "Co-Process-Broadcast"}
