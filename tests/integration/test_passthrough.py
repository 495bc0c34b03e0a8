"""The smallest job, end to end against a real broker: mini-cluster and `flink run`."""

from __future__ import annotations

import pytest

from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import ROOT, run_cli, topic_args

pytestmark = pytest.mark.integration


def _job_args(names, kafka):
    return [
        *topic_args(kafka, names),
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=1s",
    ]


def _expected(count: int) -> list[str]:
    return [f"record-{i}" for i in range(count)]


def test_minicluster_copies_topic_exactly(kafka, names):
    create_topics(kafka, {names("in"): 3, names("out"): 3})
    produce(kafka, names("in"), _expected(1500))

    run_cli("run", "passthrough", *_job_args(names, kafka))

    got = [v.decode() for v in read_all(kafka, names("out"), isolation="read_committed")]
    assert sorted(got) == sorted(_expected(1500))


@pytest.mark.cluster
def test_flink_run_on_standalone_cluster_copies_topic_exactly(kafka, names, flink_cluster):
    create_topics(kafka, {names("in"): 2, names("out"): 2})
    produce(kafka, names("in"), _expected(700))

    proc = run_cli("submit", "passthrough", *_job_args(names, kafka))

    assert "Job has been submitted with JobID" in proc.stdout
    # The cluster ran the package `pipelines package` built, not this working tree.
    assert (
        f"job passthrough from {ROOT / '.local' / 'packages' / 'passthrough' / 'pipelines'}"
        in proc.stdout
    )
    got = [v.decode() for v in read_all(kafka, names("out"), isolation="read_committed")]
    assert sorted(got) == sorted(_expected(700))
