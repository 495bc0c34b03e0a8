"""JSON text on the data path: orjson where it can, the standard library where it cannot.

orjson parses and writes a ~150-byte record several times faster than `json`, and the data
path does both for every record. Where orjson refuses what the standard library accepts
(lone surrogates, nesting past 1024 levels) or would read it differently (integers wider
than 64 bits become floats), the standard library decides, so what is valid and every
dead-letter reason stay as they were.
"""

from __future__ import annotations

import json
import re

import orjson

DecodeError = orjson.JSONDecodeError


def dumps(obj) -> str:
    """Compact JSON text with sorted keys."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: e.g. an int beyond 64 bits
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# orjson turns integers wider than 64 bits into floats (digits lost) instead of refusing. A
# value holding no float cannot have lost any; otherwise text with 19 digits in a row (in a
# number or not) goes to the standard library.
_LONG_DIGITS = re.compile(rb"[0-9]{19}")
_NOT_FLAT = (float, dict, list)


def loads_fast(data: bytes):
    """orjson.loads: raises DecodeError for anything it does not take exactly (the caller
    then asks the standard library, which gives the reason)."""
    value = orjson.loads(data)
    if type(value) is dict:
        for item in value.values():
            if type(item) in _NOT_FLAT:
                break
        else:
            return value  # a flat record without floats: nothing was widened
    if _LONG_DIGITS.search(data):
        raise DecodeError("long digit run: left to the standard library", "", 0)
    return value


def loads(text: str | bytes):
    """Parse JSON text the data path wrote itself: orjson, or the standard library for what
    orjson would not read exactly."""
    data = text.encode() if isinstance(text, str) else text
    try:
        return loads_fast(data)
    except DecodeError:
        return json.loads(data)
