"""The parse's quick path (RowParser.quick) may only ever agree with parse_value: for any
bytes it returns None (parse_value decides) or the very record parse_value accepts. And it
must be taken by the ordinary record, or it is dead code that only costs a call."""

from __future__ import annotations

import json
import random

import pytest

from pipelines.records.jsontext import JVM_MAX_NAME_CHARS
from pipelines.records.parse import RowParser, parse_value
from pipelines.settings import FieldType
from pipelines.settings.schema import FaultSettings, ParseSettings

pytestmark = pytest.mark.unit

REQUIRED = {"id": FieldType.ANY, "company": FieldType.STRING, "amount": FieldType.INTEGER}
ORDINARY = b'{"id": 7, "company": "acme", "amount": 12, "ok": true, "note": null}'

CORPUS = [
    ORDINARY,
    b'{"id": 7, "company": "acme", "amount": 12.0}',  # a float: not flat, long way
    b'{"id": 7, "company": "acme", "amount": true}',  # bool is not an integer
    b'{"id": 7, "company": 5, "amount": 12}',
    b'{"id": null, "company": "acme", "amount": 12}',
    b'{"company": "acme", "amount": 12}',
    b'{"id": 7, "company": "acme", "amount": 123456789012345678901234}',
    b'{"id": 7, "company": "acme", "amount": 12, "_origin": 1}',  # the reserved field
    b'{"id": 7, "company": "acme", "amount": 12, "tags": [1, 2]}',
    b'{"id": 7, "company": "acme", "amount": 12, "x": {"y": 1}}',
    b'{"id": 7, "company": "\\ud800", "amount": 12}',  # a lone surrogate
    b'{"id": 7, "company": "acme", "amount": 12, "id": 8}',  # a repeated name: the last
    b'[{"id": 7}]',
    b'"text"',
    b"",
    b"\xff\xfe",
    b"NaN",
    b'{"id": 7, "company": "acme", "amount": NaN}',
    b' {"id": 7, "company": "acme", "amount": -9223372036854775808} ',
    b'{"id": 7, "company": "' + b"a" * (JVM_MAX_NAME_CHARS + 10) + b'", "amount": 1}',
]


def _parser(**options) -> RowParser:
    return RowParser(
        ParseSettings(required_fields=REQUIRED), FaultSettings(), "job", subtask=0, **options
    )


def _mutations(seed: int, count: int) -> list[bytes]:
    """Ordinary records with a byte dropped, doubled or replaced: mostly invalid JSON, some
    valid with another shape."""
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        data = bytearray(ORDINARY)
        at = rnd.randrange(len(data))
        kind = rnd.randrange(3)
        if kind == 0:
            del data[at]
        elif kind == 1:
            data.insert(at, data[at])
        else:
            data[at] = rnd.choice(b'{}[]",:0123456789.-etrufalsn \\\x00\xc3\xa9')
        out.append(bytes(data))
    return out


def test_the_quick_path_returns_nothing_or_exactly_what_parse_value_accepts():
    parser = _parser()
    taken, wrong = 0, []
    for value in CORPUS + _mutations(41, 3000):
        quick = parser.quick(value)
        if quick is None:
            continue
        taken += 1
        record, reason = parse_value(value, REQUIRED, None, parser.origin_field, None)
        # json.dumps too: the same types and the same order of names, not just ==
        if reason is not None or quick != record or json.dumps(quick) != json.dumps(record):
            wrong.append((value, quick, reason))
    assert wrong == []
    assert taken > 100  # the mutations that stay valid and plain take it


def test_the_ordinary_record_takes_the_quick_path():
    assert _parser().quick(ORDINARY) == json.loads(ORDINARY)


def test_a_parser_that_checks_event_times_leaves_every_record_to_parse_value():
    assert _parser(event_time_field="ts").quick(ORDINARY) is None
    assert _parser(max_future_skew=1000).quick(ORDINARY) is None


def test_a_value_that_is_not_bytes_goes_the_long_way():
    assert _parser().quick(None) is None
    assert _parser().quick(bytearray(ORDINARY)) is None
