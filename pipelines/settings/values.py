"""Value types every settings section uses: durations, and the base model.

A duration is written `500ms`, `10s`, `5min`, `1h`, `2d` or as whole milliseconds, and
held as milliseconds.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class ConfigError(Exception):
    """A configuration that cannot run. The message names the file, the key and what is allowed."""


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|sec|m|min|h|d)?\s*$")
_UNIT_MS = {
    None: 1,
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}


def parse_duration_ms(value: Any) -> int:
    """Accept `500ms`, `10s`, `5min`, `1h`, `2d` or a whole number of milliseconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 500ms, 10s, 5min, 1h")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return value
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return int(match.group(1)) * _UNIT_MS[match.group(2)]
    raise ValueError(f"{value!r} is not a duration; use e.g. 500ms, 10s, 5min, 1h or milliseconds")


def format_ms(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


DURATION_FIELDS: set[str] = set()


def duration_fields(*names: str):
    DURATION_FIELDS.update(names)
    return field_validator(*names, mode="before")(
        lambda cls, v: None if v is None else parse_duration_ms(v)
    )
