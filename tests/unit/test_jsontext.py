"""The fast JSON path must accept exactly what the standard library accepts, and read it the
same: orjson is used only where it agrees."""

from __future__ import annotations

import json

import pytest

from pipelines import jsontext
from pipelines.parse import parse_value

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
