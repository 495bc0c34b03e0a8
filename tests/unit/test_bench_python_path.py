"""bench.python_path must time the stage's real Python path: the records it enriches are the
benchmark's, each with the demo service's answer, in the line format the JVM splits."""

from __future__ import annotations

import json

import pytest

from bench.compare import bench_values
from bench.python_path import PARTS, measure
from pipelines.records.lines import split_lines, split_meta
from pipelines_dev.enrichment_service import company_profile

pytestmark = pytest.mark.unit


def test_each_part_is_timed_and_the_batch_comes_out_enriched():
    per_record, out = measure(batch_size=40, batches=2)
    assert set(per_record) == set(PARTS)
    assert all(us > 0 for us in per_record.values())
    lines = split_lines(out)
    assert len(lines) == 40
    for offset, (line, value) in enumerate(zip(lines, bench_values(40))):
        meta, text = split_meta(line)
        assert meta  # the record's Kafka metadata, for the sink
        record = json.loads(text)
        original = json.loads(value)
        assert record.pop("_origin")["offset"] == offset  # parse.origin_field
        assert record == {**original, "enrichment": company_profile(original["company"])}
