"""The smallest job, end to end against a real broker: mini-cluster and `flink run`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import CLI, ROOT, Started, run_cli, topic_args

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
    """Two submits of the job at once (two CI jobs, two terminals), each to its own topics:
    each packages into a directory of its own (one shared directory was replaced by the
    other's package while its client read it) and copies its topic exactly."""
    copies = {"a": 700, "b": 300}

    def named(copy):
        return lambda what: names(f"{what}-{copy}")

    for copy, count in copies.items():
        create_topics(kafka, {named(copy)("in"): 2, named(copy)("out"): 2})
        produce(kafka, named(copy)("in"), _expected(count))

    submits = {
        copy: Started([*CLI, "submit", "passthrough", *_job_args(named(copy), kafka)])
        for copy in copies
    }
    packages = set()
    for submit in submits.values():
        code = submit.wait(300)
        assert code == 0, submit.output
        assert "Job has been submitted with JobID" in submit.output
        # The cluster ran the package `pipelines package` built, not this working tree: a
        # directory of this submission's own, gone once the submission ended.
        ran = re.search(
            rf"job passthrough from ({re.escape(str(ROOT / '.local' / 'packages'))}"
            rf"/passthrough-[^/\s]+)/pipelines",
            submit.output,
        )
        assert ran, submit.output
        assert not Path(ran.group(1)).exists()
        packages.add(ran.group(1))
    assert len(packages) == 2, packages
    for copy, count in copies.items():
        got = read_all(kafka, named(copy)("out"), isolation="read_committed")
        assert sorted(v.decode() for v in got) == sorted(_expected(count))
