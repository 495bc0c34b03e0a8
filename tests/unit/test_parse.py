"""Parsing and the dead-letter message: reason and origin, original bytes recoverable."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from pyflink.common import Row

from pipelines.parse import ErrorBudget, UnexpectedErrors, dead_letter, parse_value
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
