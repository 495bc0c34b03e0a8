"""The fast JSON path must accept exactly what the standard library accepts, and read it the
same: orjson is used only where it agrees."""

from __future__ import annotations

import json

import pytest

from pipelines.records import jsontext
from pipelines.records.parse import parse_value

pytestmark = pytest.mark.unit

SAME = [
    b'{"id": 1, "company": "acme", "note": "caf\\u00e9 \\u2603"}',
    b'{"a": [1, 2.5, null, true]}',
    b' {"id": 999999999999999999} ',
    b'{"id": 1, "id": 2}',
    b'{"x": -0.0, "y": 1e-7}',
]
REFUSED_BY_ORJSON = [
    b'{"id": 123456789012345678901234567890}',  # orjson would give a float
    b'{"id": -9223372036854775809}',
    b'{"a": "\\ud800"}',  # a lone surrogate
    b'{"a": 1E400}',
    b"\xff{}",
]


@pytest.mark.parametrize("data", SAME)
def test_orjson_reads_what_the_standard_library_reads(data):
    assert jsontext.loads_fast(data) == json.loads(data)


@pytest.mark.parametrize("data", REFUSED_BY_ORJSON)
def test_what_orjson_would_read_differently_goes_to_the_standard_library(data):
    with pytest.raises(jsontext.DecodeError):
        jsontext.loads_fast(data)


def test_long_integers_keep_every_digit_through_parse_and_write():
    record, reason = parse_value(b'{"id": 123456789012345678901234567890}', ["id"])
    assert reason is None and record["id"] == 123456789012345678901234567890
    assert jsontext.dumps(record) == '{"id":123456789012345678901234567890}'
    assert jsontext.loads(jsontext.dumps(record)) == record


def test_dumps_sorts_keys_and_keeps_text_readable():
    assert jsontext.dumps({"b": 1, "a": "café"}) == '{"a":"café","b":1}'


def nested(depth: int):
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("exact", [True, False])
def test_the_jvm_limits_are_exact_at_each_boundary(exact):
    """Literal limits (Jackson's StreamReadConstraints defaults; orjson writes 254 levels):
    each value at its limit passes, one past it is refused with the limit named."""
    problem = jsontext.jvm_problem
    big = 10**6  # a size that makes the exact path look
    assert problem(nested(254), big, exact) is None
    assert problem(nested(255), big, exact) == (
        "nested deeper than 254 levels (the data path's JSON limit)"
    )
    assert problem({"a": nested(253)}, big, exact) is None
    assert problem({"a": nested(254)}, big, exact) is not None
    assert problem({"n" * 50_000: 1}, big, exact) is None
    assert problem({"n" * 50_001: 1}, big, exact) == (
        "a field name longer than 50000 characters (the JVM's JSON limit)"
    )
    assert problem({"a": [{"n" * 50_001: 1}]}, big, exact) is not None  # found when nested
    assert problem(["s" * 20_000_000], big, exact) is None
    assert problem({"a": "s" * 20_000_001}, big, exact) == (
        "a string longer than 20000000 characters (the JVM's JSON limit)"
    )
    assert problem({"a": [1.5, -0.0]}, big, exact) is None
    for bad, shown in ((float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf")):
        assert problem({"a": [bad]}, big, exact) == f"a number out of the double range ({shown})"


def test_integers_and_unicode_are_checked_only_where_orjson_did_not_parse():
    problem = jsontext.jvm_problem
    digits_1000, digits_1001 = 10**999, 10**1000
    assert problem({"a": digits_1000}, 10**6, False) is None
    assert problem({"a": -digits_1000}, 10**6, False) is None
    too_long = "an integer longer than 1000 digits (the JVM's JSON limit)"
    assert problem({"a": [digits_1001]}, 10**6, False) == too_long
    assert problem({"a": -digits_1001}, 10**6, False) == too_long
    assert problem({"a": digits_1001}, 10**6, True) is None  # orjson never yields one
    assert problem({"a": "\ud800"}, 10**6, False) == (
        "a string that is not valid Unicode (a lone surrogate escape)"
    )
    assert problem({"\udc00": 1}, 10**6, False) == (
        "a field name that is not valid Unicode (a lone surrogate escape)"
    )
    assert problem({"a": "caf\u00e9 \u2603"}, 10**6, False) is None
    assert problem({"a": "\ud800"}, 10**6, True) is None


def test_a_short_text_parsed_exactly_is_not_walked():
    """Too short to nest past 254 levels or hold a long name: 508 bytes is the cut."""
    deep = nested(300)
    assert jsontext.jvm_problem(deep, 508, True) is None
    assert jsontext.jvm_problem(deep, 509, True) is not None
    assert jsontext.jvm_problem(deep, 508, False) is not None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", False),
        (b"1" * 18, False),
        (b"1" * 19, True),
        (b"x" + b"0123456789" * 2 + b"x", True),
        (b"123456789.123456789", False),  # 9 + 9 digits, a dot between
        (b'{"a":"' + b"9" * 18 + b'","b":1}', False),
        (b'{"a":"' + b"9" * 18 + b'1"}', True),  # in a string counts too: text, not numbers
    ],
)
def test_a_long_digit_run_is_19_digits_in_a_row_anywhere(data, expected):
    assert jsontext.has_long_digit_run(data) is expected


def test_a_nested_record_with_a_wide_integer_still_goes_to_the_standard_library():
    data = b'{"a": {"b": [1.5, 12345678901234567890123]}}'
    with pytest.raises(jsontext.DecodeError):
        jsontext.loads_fast(data)
    assert jsontext.loads(data) == {"a": {"b": [1.5, 12345678901234567890123]}}
