"""Parsing and the dead-letter message: reason and origin, original bytes recoverable."""

from __future__ import annotations

import base64
import json

import pytest
from pyflink.common import Row

from pipelines.parse import dead_letter, parse_value

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("value,reason", [
    (b"{not json", "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    (b"\xff\xfe", "not UTF-8: invalid start byte at byte 0"),
    (b"[1, 2]", "not a JSON object: list"),
    (b'{"company": "x"}', "missing required field(s): id"),
    (None, "empty record (null value)"),
])
def test_bad_values_are_explained(value, reason):
    assert parse_value(value, ["id"]) == (None, reason)


def test_good_value_parses():
    assert parse_value(b'{"id": 7, "company": "acme"}', ["id"]) == ({"id": 7, "company": "acme"}, None)


def test_dead_letter_carries_origin_and_original_bytes():
    row = Row(topic="in", partition=2, offset=41, timestamp=1700000000000, key=b"k",
              value=b"\xff{broken")
    message = json.loads(dead_letter(row, "not UTF-8", "enrich"))
    assert message["origin"] == {"topic": "in", "partition": 2, "offset": 41,
                                 "timestamp": 1700000000000}
    assert message["error"] == "not UTF-8"
    assert message["job"] == "enrich"
    assert base64.b64decode(message["value_b64"]) == b"\xff{broken"
    assert base64.b64decode(message["key_b64"]) == b"k"
