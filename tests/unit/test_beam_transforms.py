"""The Beam pipeline's composite transforms with TestPipeline (no Kafka, no Java): the
same records and dead letters as the PyFlink stages, through a lookup client written here."""

from __future__ import annotations

import json
from collections import namedtuple

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.beam.run import bounded_read_problem
from pipelines.beam.transforms import (
    ConfigUnsupported,
    EnrichRecords,
    ParseRecords,
    consumer_config,
)
from pipelines.lookups import PermanentLookupError
from pipelines.records.lines import split_meta
from pipelines.running import registry
from pipelines.settings import ConfigError, load_settings

pytestmark = pytest.mark.unit

Row = namedtuple("Row", "topic partition offset timestamp key value")
TIERS = {"acme": {"tier": "gold"}}


class TierTable:
    async def lookup(self, record):
        if record["company"] not in TIERS:
            raise PermanentLookupError(f"no tier for {record['company']!r}")
        return TIERS[record["company"]]

    async def close(self):
        pass


def tier_table(settings):
    return TierTable()


def settings(*overrides):
    return load_settings(
        "enrich", sections=registry.load("enrich").sections, environ={}, overrides=list(overrides)
    ).settings


def rows(*values):
    return [Row("in", 0, i, 1000 + i, None, v) for i, v in enumerate(values)]


def test_parse_and_enrich_give_records_and_dead_letters_with_reasons():
    s = settings("enrichment.batch_size=2")
    good = [{"id": i, "company": c} for i, c in enumerate(["acme", "acme", "globex"])]
    inputs = rows(*(json.dumps(r).encode() for r in good), b"{not json", None)
    with TestPipeline() as p:
        parsed = p | beam.Create(inputs) | "Parse" >> ParseRecords(s)
        enriched = parsed.records | "Enrich" >> EnrichRecords(s, tier_table)
        assert_that(
            enriched.enriched
            | beam.Map(lambda t: json.loads(split_meta(t)[1]))
            | beam.Map(lambda r: (r["id"], r["enrichment"])),
            equal_to([(0, {"tier": "gold"}), (1, {"tier": "gold"})]),
            label="enriched",
        )
        assert_that(
            parsed.dead_letters | beam.Map(lambda t: json.loads(t)["error"]),
            equal_to(
                [
                    "not valid JSON: Expecting property name enclosed in double "
                    "quotes at line 1 column 2",
                    "empty record (null value)",
                ]
            ),
            label="parse dead letters",
        )
        assert_that(
            enriched.dead_letters
            | beam.Map(lambda t: (json.loads(t)["stage"], json.loads(t)["error"])),
            equal_to([("enrich", "enrichment refused the record: no tier for 'globex'")]),
            label="enrich dead letters",
        )


def test_records_keep_their_origin():
    s = settings()
    with TestPipeline() as p:
        parsed = p | beam.Create(rows(b'{"id": 7, "company": "acme"}')) | ParseRecords(s)
        assert_that(
            parsed.records | beam.Map(lambda key_record: key_record[1]["_origin"]),
            equal_to([{"topic": "in", "partition": 0, "offset": 0, "timestamp": 1000}]),
        )


def test_beam_settings_are_checked_before_anything_runs():
    with pytest.raises(ConfigError) as err:
        settings("beam.runner=direct")
    assert "the direct runner reads bounded only: set beam.streaming: false" in str(err.value)
    with pytest.raises(ConfigError) as err:
        settings("beam.streaming=false")
    assert "a bounded run (beam.streaming: false) needs beam.max_records or " in str(err.value)


def test_start_modes_the_beam_read_supports():
    assert consumer_config(settings())["auto.offset.reset"] == "earliest"
    assert (
        consumer_config(settings("source.start.fallback=latest"))["auto.offset.reset"] == "latest"
    )
    with pytest.raises(ConfigUnsupported, match="source.start.mode: latest is not supported"):
        consumer_config(settings("source.start.mode=latest"))


def test_a_bounded_read_a_partition_cannot_supply_is_named():
    s = settings("beam.runner=direct", "beam.streaming=false", "beam.max_records=30")
    ends = {("in", 0): 30, ("in", 1): 10, ("in", 2): 9}
    assert bounded_read_problem(s, ends, {}) == (
        "beam.max_records: 30 over 3 partitions is 10 from each, and in[2] has 9 after the "
        "start offset: the read would wait forever. Lower beam.max_records, or use "
        "beam.max_read_time"
    )
    assert bounded_read_problem(s, {**ends, ("in", 2): 10}, {}) is None
    assert bounded_read_problem(s, {**ends, ("in", 2): 15}, {("in", 2): 6}) is not None
