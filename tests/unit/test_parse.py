"""Parsing and the dead-letter message: reason and origin, original bytes recoverable."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from pyflink.common import Row

from pipelines.records.parse import ErrorBudget, UnexpectedErrors, dead_letter, parse_value
from pipelines.settings import ErrorSettings, FieldType

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "value,reason",
    [
        (
            b"{not json",
            "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2",
        ),
        (b"\xff\xfe", "not UTF-8: invalid start byte at byte 0"),
        (b"[1, 2]", "not a JSON object: list"),
        (b'{"company": "x"}', "missing required field(s): id"),
        (None, "empty record (null value)"),
    ],
)
def test_bad_values_are_explained(value, reason):
    assert parse_value(value, ["id"]) == (None, reason)


def test_good_value_parses():
    assert parse_value(b'{"id": 7, "company": "acme"}', ["id"]) == (
        {"id": 7, "company": "acme"},
        None,
    )


def test_dead_letter_carries_origin_and_original_bytes():
    row = Row(
        topic="in", partition=2, offset=41, timestamp=1700000000000, key=b"k", value=b"\xff{broken"
    )
    message = json.loads(dead_letter(row, "not UTF-8", "enrich"))
    assert message["origin"] == {
        "topic": "in",
        "partition": 2,
        "offset": 41,
        "timestamp": 1700000000000,
    }
    assert message["error"] == "not UTF-8"
    assert message["job"] == "enrich"
    assert base64.b64decode(message["value_b64"]) == b"\xff{broken"
    assert base64.b64decode(message["key_b64"]) == b"k"


NESTED = b"[" * 50_000 + b"]" * 50_000


@pytest.mark.parametrize(
    "value,reason",
    [
        (NESTED, "not parseable: JSON nested deeper than the parser's recursion limit"),
        (
            b'{"id": ' + b"9" * 5000 + b"}",
            "not parseable: Exceeds the limit (4300 digits) for "
            "integer string conversion: value has 5000 digits; use "
            "sys.set_int_max_str_digits() to increase the limit",
        ),
        (b'{"id": NaN}', "not parseable: NaN is not valid JSON"),
        (b'"just a string"', "not a JSON object: str"),
        (b"null", "not a JSON object: NoneType"),
        (b'{"id": null, "company": "x"}', "required field(s) not usable: id is null"),
        (b'{"id": 1, "company": null}', "required field(s) not usable: company is null"),
        (b'{"id": 1, "company": 5}', "required field(s) not usable: company is int, not string"),
        (b'{"id": true, "company": "x"}', "required field(s) not usable: id is bool, not integer"),
        (
            b'{"id": 1, "company": "x", "_origin": "mine"}',
            "field '_origin' is reserved for the record's origin (parse.origin_field); rename it in "
            "the data or set parse.origin_field",
        ),
    ],
)
def test_pathological_values_are_explained_never_raised(value, reason):
    required = {"id": FieldType.INTEGER, "company": FieldType.STRING}
    assert parse_value(value, required, origin_field="_origin") == (None, reason)


def test_a_user_field_named_source_is_kept():
    record, _ = parse_value(b'{"id": 1, "source": "crm"}', ["id"], origin_field="_origin")
    assert record == {"id": 1, "source": "crm"}


@pytest.mark.parametrize("size", [900_000, 5_000_000])
def test_dead_letter_of_a_huge_record_fits_the_sink_and_keeps_size_and_digest(size):
    original = bytes(range(256)) * (size // 256)
    row = Row(topic="in", partition=0, offset=1, timestamp=0, key=b"k" * 100_000, value=original)
    text = dead_letter(row, "not UTF-8", "enrich", max_bytes=1_048_576)
    assert len(text.encode()) <= 1_048_576
    message = json.loads(text)
    assert message["value_truncated"] is True
    assert message["value_size"] == len(original)
    assert message["value_sha256"] == hashlib.sha256(original).hexdigest()
    kept = base64.b64decode(message["value_b64"])
    assert original.startswith(kept) and len(kept) > 600_000
    assert message["key_size"] == 100_000 and message["key_truncated"] is True


def test_small_originals_are_kept_whole():
    row = Row(topic="in", partition=0, offset=1, timestamp=0, key=None, value=b"\xff")
    message = json.loads(dead_letter(row, "x", "enrich"))
    assert "value_truncated" not in message and base64.b64decode(message["value_b64"]) == b"\xff"
    assert message["key_b64"] is None


def test_error_budget_tells_a_bad_record_from_a_bug():
    budget = ErrorBudget(ErrorSettings(max_unexpected_in_a_row=3), "parse")
    assert budget.failed(KeyError("x")) == "unexpected error in parse: KeyError: 'x'"
    budget.failed(KeyError("x"))
    budget.ok()  # a record got through: the count starts again
    budget.failed(KeyError("x"))
    budget.failed(KeyError("x"))
    with pytest.raises(UnexpectedErrors, match="3 records in a row failed in parse"):
        budget.failed(KeyError("x"))


TYPED = {
    "s": FieldType.STRING,
    "i": FieldType.INTEGER,
    "n": FieldType.NUMBER,
    "b": FieldType.BOOLEAN,
    "o": FieldType.OBJECT,
    "a": FieldType.ARRAY,
}
GOOD = {"s": "x", "i": 3, "n": 2.5, "b": False, "o": {}, "a": []}


@pytest.mark.parametrize(
    "field,value,reason",
    [
        ("s", 1, "s is int, not string"),
        ("i", 2.0, "i is float, not integer"),
        ("i", True, "i is bool, not integer"),
        ("n", "2", "n is str, not number"),
        ("n", True, "n is bool, not number"),
        ("n", float("inf"), "n is float, not number"),
        ("n", float("nan"), "n is float, not number"),
        ("b", 0, "b is int, not boolean"),
        ("o", [], "o is list, not object"),
        ("a", {}, "a is dict, not array"),
    ],
)
def test_each_field_type_takes_its_own_json_type_only(field, value, reason):
    from pipelines.records.parse import check_record

    assert check_record({**GOOD, field: value}, TYPED) == (
        None,
        f"required field(s) not usable: {reason}",
    )


def test_every_field_type_accepts_its_values_and_numbers_take_integers():
    from pipelines.records.parse import check_record

    record = {**GOOD, "n": 7}
    assert check_record(record, TYPED) == (record, None)
    assert check_record({**GOOD, "n": -0.5}, TYPED)[1] is None


# Every JSON value's Python type, and the edge cases of each field type's rule.
EVERY_KIND = [None, True, False, 0, -3, 2**70, 0.5, float("inf"), float("nan"), "", "x",
              [], [1], {}, {"a": 1}]  # fmt: skip


@pytest.mark.parametrize("wanted", list(FieldType))
@pytest.mark.parametrize("value", EVERY_KIND, ids=repr)
def test_the_fast_path_for_plain_types_agrees_with_the_full_rule(wanted, value):
    """check_record passes a plain-typed field without asking field_problem: whatever it
    passes or refuses, the full rule must say the same."""
    from pipelines.records.parse import check_record, field_problem

    why = field_problem({"f": value}, "f", wanted)
    expected = ({"f": value}, None) if why is None else (
        None, f"required field(s) not usable: f is {why}")  # fmt: skip
    assert check_record({"f": value}, {"f": wanted}) == expected


def test_all_problems_are_named_missing_first():
    from pipelines.records.parse import check_record

    assert check_record({"s": 1, "i": None}, {"s": FieldType.STRING, "i": FieldType.ANY}) == (
        None,
        "required field(s) not usable: s is int, not string; i is null",
    )
    assert check_record(
        {"s": 1}, {"s": FieldType.STRING, "x": FieldType.ANY, "y": FieldType.ANY}
    ) == (
        None,
        "missing required field(s): x, y",
    )


@pytest.mark.parametrize(
    "ts,ok",
    [(0, True), ((1 << 63) - 1, True), (-1, False), (1 << 63, False), (1.0, False), (True, False)],
)
def test_event_time_is_a_java_long_of_epoch_milliseconds(ts, ok):
    from pipelines.records.parse import check_record

    record, reason = check_record({"id": 1, "ts": ts}, ["id"], event_time_field="ts")
    assert (record is not None) is ok
    if not ok:
        assert reason == f"ts is not epoch milliseconds: {ts!r}"


def test_a_future_event_time_is_refused_past_the_skew_only():
    import time

    from pipelines.records.parse import check_record

    now = int(time.time() * 1000)
    assert check_record({"id": 1, "ts": now + 60_000}, ["id"], "ts", None, 120_000)[1] is None
    _, reason = check_record({"id": 1, "ts": now + 600_000}, ["id"], "ts", None, 120_000)
    assert reason.startswith(f"ts {now + 600_000} is ") and reason.endswith(
        " ms ahead of processing time, more than watermarks.max_future_skew (120000 ms): it "
        "would make every later record of its partition late"
    )


def test_a_dead_letter_is_exactly_these_fields_in_sorted_order():
    row = Row(topic="in", partition=1, offset=9, timestamp=5, key=b"k", value=b"caf\xc3\xa9 \xff!")
    text = dead_letter(row, "r" * 1500, "enrich")
    assert text == json.dumps(
        {
            "error": "r" * 1000,  # reasons are cut at 1000 characters
            "job": "enrich",
            "stage": "parse",
            "origin": {"topic": "in", "partition": 1, "offset": 9, "timestamp": 5},
            "key_b64": "aw==",
            "key_sha256": hashlib.sha256(b"k").hexdigest(),
            "key_size": 1,
            "value_b64": base64.b64encode(b"caf\xc3\xa9 \xff!").decode(),
            "value_sha256": hashlib.sha256(b"caf\xc3\xa9 \xff!").hexdigest(),
            "value_size": 8,
            "value_preview": "café \ufffd!",
        },
        sort_keys=True,
    )
    null = json.loads(
        dead_letter(
            Row(topic="in", partition=0, offset=0, timestamp=0, key=None, value=None),
            "x",
            "j",
            stage="enrich",
        )
    )
    assert (null["value_b64"], null["value_preview"], null["key_b64"], null["stage"]) == (
        None,
        None,
        None,
        "enrich",
    )
    assert "value_size" not in null


def test_the_preview_is_the_first_200_characters():
    value = ("é" * 300).encode()
    message = json.loads(
        dead_letter(
            Row(topic="t", partition=0, offset=0, timestamp=0, key=None, value=value), "x", "j"
        )
    )
    assert message["value_preview"] == "é" * 200


def test_a_key_keeps_at_most_64_kib_and_the_value_the_rest():
    row = Row(topic="t", partition=0, offset=0, timestamp=0, key=b"k" * 70_000, value=b"v" * 10)
    message = json.loads(dead_letter(row, "x", "j", max_bytes=1_048_576))
    assert len(base64.b64decode(message["key_b64"])) == 65_536
    assert message["key_truncated"] is True and "value_truncated" not in message


def test_a_stage_dead_letter_carries_the_record_without_its_origin():
    from pipelines.records.parse import record_dead_letter

    origin = {"topic": "in", "partition": 0, "offset": 3, "timestamp": 1}
    text = record_dead_letter(
        {"id": 1, "b": "x", "_origin": origin},
        "lookup failed",
        "enrich",
        "enrich",
        "_origin",
        1_048_576,
    )
    original = b'{"b": "x", "id": 1}'
    assert json.loads(text) == {
        "error": "lookup failed",
        "job": "enrich",
        "stage": "enrich",
        "origin": origin,
        "key_b64": None,
        "value_b64": base64.b64encode(original).decode(),
        "value_sha256": hashlib.sha256(original).hexdigest(),
        "value_size": len(original),
        "value_preview": original.decode(),
    }
    small = json.loads(
        record_dead_letter({"id": 1, "pad": "p" * 40_000}, "x", "enrich", "enrich", None, 30_000)
    )
    assert small["origin"] is None and small["value_truncated"] is True
    assert len(base64.b64decode(small["value_b64"])) == (30_000 - 16_384) * 3 // 4
