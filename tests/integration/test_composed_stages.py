"""Stages compose: one job parses its input twice and writes two topics through two
exactly-once sinks (tests/integration/jobs/two_outputs.py), on a local mini-cluster
against the real broker; both outputs and the dead letters read back exactly."""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest

from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import Started, topic_args

pytestmark = pytest.mark.integration

PARTITIONS = 3


def inputs(count: int) -> list[bytes]:
    """Every 50th (from the 7th) not JSON; every 3rd with a string tag; the rest an id only."""
    values = []
    for i in range(count):
        if i % 50 == 7:
            values.append(f"{{not json {i}".encode())
        elif i % 3 == 0:
            values.append(json.dumps({"id": i, "tag": f"t{i % 5}"}).encode())
        else:
            values.append(json.dumps({"id": i}).encode())
    return values


def test_a_job_parsing_twice_writes_two_topics_exactly_once(kafka, names):
    create_topics(
        kafka, {names("in"): PARTITIONS, names("out"): 2, names("tagged"): 2, names("dlq"): 1}
    )
    values = inputs(900)
    produce(kafka, names("in"), values)  # value i at partition i % 3, offset i // 3
    job = Started(
        [
            sys.executable,
            "-m",
            "tests.integration.jobs.two_outputs",
            *topic_args(kafka, names, dead_letters=True),
            *("--set", "source.bounded=true", "--set", "checkpoint.interval=1s"),
            *("--strict-topic", names("tagged")),
        ]
    )
    assert job.wait(timeout=300) == 0, job.output[-3000:]

    def ids(topic: str) -> list[int]:
        return sorted(json.loads(v)["id"] for v in read_all(kafka, topic))

    records = [json.loads(v) for v in values if not v.startswith(b"{not")]
    assert ids(names("out")) == sorted(r["id"] for r in records)
    assert ids(names("tagged")) == sorted(r["id"] for r in records if "tag" in r)
    origin = {(i % PARTITIONS, i // PARTITIONS): v for i, v in enumerate(values)}
    dead = Counter()
    for letter in map(json.loads, read_all(kafka, names("dlq"))):
        where = (letter["origin"]["partition"], letter["origin"]["offset"])
        dead[(where, letter["stage"])] += 1
    expected = Counter()
    for where, value in origin.items():
        if value.startswith(b"{not"):
            expected[(where, "parse")] += 1
            expected[(where, "parse-tagged")] += 1
        elif b'"tag"' not in value:
            expected[(where, "parse-tagged")] += 1
    assert dead == expected
