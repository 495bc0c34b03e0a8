"""The parse stage's ProcessFunction, driven element by element as Flink's Python worker
drives it (open, then process_element per element). A runtime context stands in for the
worker's: only the subtask index and the metrics group are read. The jobs' integration
tests run the same function in real Flink; these pin each branch with exact values."""

from __future__ import annotations

import base64
import json
import time

import pytest
from pyflink.common import Row

from pipelines.records.parse import (
    DEAD_LETTER_TAG,
    InjectedFault,
    UnexpectedErrors,
    make_parse_function,
)
from pipelines.settings import ErrorSettings, FieldType
from pipelines.settings.schema import FaultSettings, ParseSettings

pytestmark = pytest.mark.unit

META = "\x01"  # the metadata separator (pipelines.stages), spelled out here on purpose


class _Metrics:
    def __init__(self):
        self.gauges = {}

    def gauge(self, name, fn):
        self.gauges[name] = fn


class _Context:
    def __init__(self, subtask=0):
        self.subtask, self.metrics = subtask, _Metrics()

    def get_index_of_this_subtask(self):
        return self.subtask

    def get_metrics_group(self):
        return self.metrics


def row(value, offset=5, partition=1, key=b"k1", headers=None, timestamp=1_700_000_000_123):
    return Row(
        topic="in",
        partition=partition,
        offset=offset,
        timestamp=timestamp,
        key=key,
        value=value,
        headers=headers,
    )


def opened(subtask=0, parse=None, faults=None, **kwargs):
    fn, tag = make_parse_function(
        parse or ParseSettings(), faults or FaultSettings(), "enrich", **kwargs
    )
    ctx = _Context(subtask)
    fn.open(ctx)
    return fn, tag, ctx


def run(fn, batch):
    """The function's output for a batch of rows, or for one row as a batch of one."""
    return list(fn.process_element(batch if isinstance(batch, list) else [batch], None))


def test_a_valid_record_goes_on_as_json_with_its_origin():
    fn, _, _ = opened()
    (out,) = run(fn, row(b'{"id": 7, "company": "acme"}'))
    assert json.loads(out) == {
        "id": 7,
        "company": "acme",
        "_origin": {"topic": "in", "partition": 1, "offset": 5, "timestamp": 1_700_000_000_123},
    }


def test_no_origin_block_when_the_origin_field_is_null():
    fn, _, _ = opened(parse=ParseSettings(origin_field=None))
    assert [json.loads(out) for out in run(fn, row(b'{"id": 7}'))] == [{"id": 7}]


def test_the_origin_goes_under_the_configured_name():
    fn, _, _ = opened(parse=ParseSettings(origin_field="src"))
    (out,) = run(fn, row(b'{"id": 7}', offset=9, partition=0))
    assert json.loads(out)["src"] == {
        "topic": "in",
        "partition": 0,
        "offset": 9,
        "timestamp": 1_700_000_000_123,
    }


def test_a_bad_record_goes_to_the_side_output_with_reason_origin_and_bytes():
    fn, tag, ctx = opened()
    ((side, text),) = run(fn, row(b"{oops", offset=11, partition=2))
    assert side is tag and tag.tag_id == DEAD_LETTER_TAG
    message = json.loads(text)
    assert message["error"].startswith("not valid JSON: ")
    assert message["origin"] == {
        "topic": "in",
        "partition": 2,
        "offset": 11,
        "timestamp": 1_700_000_000_123,
    }
    assert base64.b64decode(message["value_b64"]) == b"{oops"
    assert message["job"] == "enrich"
    assert ctx.metrics.gauges["deadLetters"]() == 1


def test_the_dead_letter_gauge_counts_only_dead_letters():
    fn, _, ctx = opened()
    for value in (b'{"id": 1}', b"x", b'{"id": 2}', b"[1]", b'{"no": 1}'):
        run(fn, row(value))
    assert ctx.metrics.gauges["deadLetters"]() == 3


def test_required_fields_and_extra_required_fields_both_apply():
    parse = ParseSettings(required_fields={"id": FieldType.INTEGER})
    fn, _, _ = opened(parse=parse, extra_required={"ts": FieldType.INTEGER})
    ((_, text),) = run(fn, row(b'{"id": 1}'))
    assert json.loads(text)["error"] == "missing required field(s): ts"
    ((_, text),) = run(fn, row(b'{"ts": 1}'))
    assert json.loads(text)["error"] == "missing required field(s): id"
    assert len(run(fn, row(b'{"id": 1, "ts": 2}'))) == 1


def test_the_event_time_field_is_checked():
    fn, _, _ = opened(event_time_field="ts")
    ((_, text),) = run(fn, row(b'{"id": 1, "ts": "noon"}'))
    assert "ts" in json.loads(text)["error"]
    (out,) = run(fn, row(b'{"id": 1, "ts": 1700000000000}'))
    assert json.loads(out)["ts"] == 1_700_000_000_000


def test_the_future_skew_limit_is_applied():
    far = int(time.time() * 1000) + 3_600_000
    fn, _, _ = opened(event_time_field="ts", max_future_skew=60_000)
    ((_, text),) = run(fn, row(json.dumps({"id": 1, "ts": far}).encode()))
    assert "future" in json.loads(text)["error"]
    fn, _, _ = opened(event_time_field="ts")
    assert json.loads(run(fn, row(json.dumps({"id": 1, "ts": far}).encode()))[0])["ts"] == far


def test_batched_elements_give_one_joined_element_and_each_bad_record_alone():
    fn, tag, _ = opened()
    out = run(fn, [row(b'{"id": 1}', offset=0), row(b"bad", offset=1), row(b'{"id": 2}', offset=2)])
    assert [type(o) for o in out] == [tuple, str]
    side, text = out[0]
    assert side is tag and json.loads(text)["origin"]["offset"] == 1
    lines = out[1].split("\n")
    assert [json.loads(line)["id"] for line in lines] == [1, 2]
    assert [json.loads(line)["_origin"]["offset"] for line in lines] == [0, 2]


def test_a_batch_of_only_bad_records_emits_no_empty_element():
    fn, _, _ = opened()
    out = run(fn, [row(b"bad", offset=0), row(b"worse", offset=1)])
    assert [json.loads(text)["origin"]["offset"] for _, text in out] == [0, 1]


def test_metadata_is_carried_as_a_prefix_when_asked():
    fn, _, _ = opened(carry_metadata=True)
    (out,) = run(fn, row(b'{"id": 1}', key=b"key-1", headers=b"h", timestamp=42))
    _, key, headers, stamp, text = out.split(META, 4)
    assert base64.b64decode(key) == b"key-1" and base64.b64decode(headers) == b"h"
    assert stamp == "42" and json.loads(text)["id"] == 1
    fn, _, _ = opened()
    assert not run(fn, row(b'{"id": 1}'))[0].startswith(META)


def test_the_injected_fault_fires_once_at_its_record_per_marker_directory(tmp_path):
    faults = FaultSettings(fail_after_records=3, marker_dir=str(tmp_path))
    fn, _, _ = opened(subtask=1, faults=faults)
    assert len(run(fn, row(b'{"id": 1}'))) == 1
    assert len(run(fn, row(b'{"id": 2}'))) == 1
    with pytest.raises(InjectedFault, match=r"injected fault after 3 records \(subtask 1\)"):
        run(fn, row(b'{"id": 3}'))
    assert (tmp_path / "fault-fired-1").exists()
    fn, _, _ = opened(subtask=1, faults=faults)  # restarted: the marker says it has fired
    assert [len(run(fn, row(b'{"id": i}'))) for i in range(5)] == [1] * 5
    fn, _, _ = opened(subtask=0, faults=faults)  # another subtask fires its own
    run(fn, row(b'{"id": 1}'))
    run(fn, row(b'{"id": 2}'))
    with pytest.raises(InjectedFault):
        run(fn, row(b'{"id": 3}'))


def test_an_unexpected_error_dead_letters_the_record_and_a_run_of_them_fails_the_job():
    fn, _, ctx = opened(errors=ErrorSettings(max_unexpected_in_a_row=2))
    # Six fields, no headers: unpacking fails, though the dead letter still finds its origin.
    broken = Row(topic="in", partition=0, offset=1, timestamp=0, key=None, value=b'{"id": 1}')
    ((_, text),) = run(fn, broken)
    assert json.loads(text)["error"].startswith("unexpected error in parse: ValueError: ")
    assert ctx.metrics.gauges["deadLetters"]() == 1
    run(fn, row(b'{"id": 1}'))  # a good record resets the run
    run(fn, broken)
    with pytest.raises(UnexpectedErrors, match="2 records in a row failed in parse"):
        run(fn, broken)


def test_a_huge_bad_record_is_cut_to_the_configured_size():
    fn, _, _ = opened(dead_letter_max_bytes=100_000)
    ((_, text),) = run(fn, row(b"\xff" * 500_000))
    assert len(text.encode()) <= 100_000 and json.loads(text)["value_size"] == 500_000
