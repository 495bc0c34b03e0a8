"""Smoke test of the TEMPLATE_JOB job: every input record comes out
exactly once, byte for byte, malformed ones included (the copy does not parse them).
Extend it as the job becomes yours."""

from __future__ import annotations

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.topics import create_topics, produce, read_all
from tests.support import run_cli, topic_args

pytestmark = pytest.mark.integration


def test_TEMPLATE_JOB_copies_every_record_once(kafka, names):
    values = demo_values(300, bad_every=50)
    create_topics(kafka, {names("in"): 3, names("out"): 3})
    produce(kafka, names("in"), values)
    run_cli(
        "run",
        "TEMPLATE_JOB",
        *topic_args(kafka, names),
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=1s",
    )
    assert sorted(read_all(kafka, names("out"))) == sorted(values)
