"""bench's per-record comparison job (bench/enrich_per_record.py) builds each of its two
operators around the project's stages, and bench.operators times a run by the broker's
timestamps of the records written."""

from __future__ import annotations

import pickle

import pytest

from bench import enrich_per_record
from bench.operators import written_rate
from pipelines.flink.environment import create_environment
from pipelines.host.paths import PROJECT_ROOT
from pipelines.settings import load_settings
from pipelines.stages import graph_of

pytestmark = pytest.mark.unit

CONF = PROJECT_ROOT / "bench" / "conf"


def built(operator: str):
    settings = load_settings(
        "enrich_per_record",
        overrides=[f"per_record.operator={operator}"],
        conf_dir=CONF,
        environ={},
        sections=enrich_per_record.job.sections,
    ).settings
    env = create_environment(settings)
    enrich_per_record.job.build(env, settings)
    return env


# What PyFlink hands the worker for each: a map adapted to a ProcessFunction, or the
# AsyncDataStream's descriptor of an AsyncFunction.
PICKLED = {"sync": "MapProcessFunctionAdapter", "async": "AsyncFunctionDescriptor"}


@pytest.mark.parametrize("operator", PICKLED)
def test_each_per_record_operator_sits_between_the_projects_stages(flink_env, operator):
    env = built(operator)
    assert graph_of(env).uses() == ("enrichment",)  # sized and preflighted as enrichment
    graph = env._generate_stream_graph(clear_transformations=True)
    nodes = {n.getTransformationUID(): n for n in graph.getStreamNodes().toArray()}
    assert {"kafka-source", "batch", "parse", "records", "enrich-per-record", "enriched"} <= set(
        nodes
    )
    assert {"kafka-sink", "dead-letter-sink", "enrich-dead-letters"} <= set(nodes)
    stage = nodes["enrich-per-record"].getOperatorFactory().getOperator()
    function = stage.getPythonFunctionInfo().getPythonFunction()
    pickled = pickle.loads(bytes(function.getSerializedPythonFunction()))
    assert type(pickled).__name__ == PICKLED[operator]


def test_a_rate_counts_from_the_end_of_the_first_burst():
    # Steady output: 1,000 records a second, one every millisecond.
    assert written_rate(list(range(1_000, 3_001))) == pytest.approx(1_000, rel=0.01)
    # A blocking 20-a-second lookup answered in bundles of 100: the first bundle comes out
    # at once after 5 s of work, the last 60 records 3 s later.
    bundles = [5_000] * 100 + [8_000] * 60
    assert written_rate(bundles) == 20.0
    assert written_rate([7_000, 7_001]) == 0.0  # one burst: nothing to time
    assert written_rate([]) == 0.0
