"""JSON text on the data path: orjson where it can, the standard library where it cannot.

orjson parses and writes a ~150-byte record several times faster than `json`, and the data
path does both for every record. Where orjson refuses what the standard library accepts
(lone surrogates, nesting past 1024 levels) or would read it differently (integers wider
than 64 bits become floats), the standard library decides, so what is valid and every
dead-letter reason stay as they were.
"""

from __future__ import annotations

import json
import math

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
# number or not) goes to the standard library. Found by mapping every digit to "0" and
# looking for 19 zeros: a regex search took 0.5 ms over a batch's 40 KB of answers (1 us a
# record on the lookups' loop), this takes 0.05.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_DIGIT_RUN = b"0" * 19
_NOT_FLAT = frozenset((float, dict, list))


def _flat(value) -> bool:
    """An object whose values are neither floats nor objects nor arrays."""
    return type(value) is dict and _NOT_FLAT.isdisjoint(map(type, value.values()))


def has_long_digit_run(data: bytes) -> bool:
    """Whether `data` holds 19 or more ASCII digits in a row."""
    return _LONG_DIGIT_RUN in data.translate(_DIGITS_AS_ZERO)


def loads_fast(data: bytes):
    """orjson.loads: raises DecodeError for anything it does not take exactly (the caller
    then asks the standard library, which gives the reason)."""
    value = orjson.loads(data)
    if _flat(value):
        return value  # a flat record without floats: nothing was widened
    if has_long_digit_run(data):
        raise DecodeError("long digit run: left to the standard library", "", 0)
    return value


def loads_flat(data: bytes) -> dict | None:
    """The record in `data` when it is a flat JSON object (no floats, objects or arrays as
    values) small enough that no name or string in it can pass the JVM's limits, exactly
    as `loads_fast` and `jvm_problem` would accept it; None for anything else, which the
    caller then decides the long way. The common record, in one call."""
    if len(data) > JVM_MAX_NAME_CHARS:
        return None
    try:
        value = orjson.loads(data)
    except DecodeError:
        return None
    return value if _flat(value) else None


def loads(text: str | bytes):
    """Parse JSON text the data path wrote itself: orjson, or the standard library for what
    orjson would not read exactly."""
    data = text.encode() if isinstance(text, str) else text
    try:
        return loads_fast(data)
    except DecodeError:
        return json.loads(data)


# What the JVM's JSON reader refuses (Flink's shaded Jackson 2.18, StreamReadConstraints
# defaults; tests/unit/test_parse_jvm_agreement.py reads them from the JVM): a record parse
# accepts must never reach a Java operator that cannot read it, or the task fails on it
# after every restart.
JVM_MAX_DEPTH = 1000
JVM_MAX_NUMBER_DIGITS = 1000
JVM_MAX_NAME_CHARS = 50_000
JVM_MAX_STRING_CHARS = 20_000_000
_JVM_INT_BOUND = 10**JVM_MAX_NUMBER_DIGITS
# orjson writes at most 254 levels (the standard library's fallback, bounded by Python's
# recursion limit, fails at a depth that depends on the stack): the data path's own limit.
WRITER_MAX_DEPTH = 254
MAX_DEPTH = min(JVM_MAX_DEPTH, WRITER_MAX_DEPTH)


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def jvm_problem(value, size: int, exact: bool) -> str | None:
    """Why `value` could not be written as JSON text here and read by the JVM, or None.

    `exact`: orjson parsed it (`loads_fast`): its integers fit 64 bits, its floats are finite,
    its strings are valid Unicode and it nests at most 1024 levels. Then only depth, names
    and strings can exceed the JVM's limits, and only in a text of `size` bytes large enough
    to hold them: a typical record costs one comparison. What the standard library parsed
    (wide integers, lone surrogates, 1e400 read as infinity) is walked whole."""
    if exact and size <= 2 * MAX_DEPTH:  # too short to nest deeper or hold a long name
        return None
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is dict or kind is list:
            if depth > MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels (the data path's JSON limit)"
            if kind is list:
                stack.extend((item, depth + 1) for item in node)
                continue
            for name, item in node.items():
                if len(name) > JVM_MAX_NAME_CHARS:
                    return f"a field name longer than {JVM_MAX_NAME_CHARS} characters (the JVM's JSON limit)"
                if not exact and not _utf8(name):
                    return "a field name that is not valid Unicode (a lone surrogate escape)"
                stack.append((item, depth + 1))
        elif kind is str:
            if len(node) > JVM_MAX_STRING_CHARS:
                return (
                    f"a string longer than {JVM_MAX_STRING_CHARS} characters (the JVM's JSON limit)"
                )
            if not exact and not _utf8(node):
                return "a string that is not valid Unicode (a lone surrogate escape)"
        elif kind is float:
            if node != node or node in (math.inf, -math.inf):
                return f"a number out of the double range ({node!r})"
        elif kind is int and not exact and not -_JVM_INT_BOUND < node < _JVM_INT_BOUND:
            return f"an integer longer than {JVM_MAX_NUMBER_DIGITS} digits (the JVM's JSON limit)"
    return None
