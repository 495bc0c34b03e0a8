"""The line format Python stages answer in, shared by the Flink stages, the Beam
transforms and the Java side (jars/src SplitLines, RecordSerializer).

A batched stage answers a batch with ONE string, its records as JSON text, one per line
(`join_lines`): JSON text never contains a raw newline (it escapes it), so lines are
records. A line starting with DEAD_MARK is a dead letter of that stage; one starting with
META carries its input record's key, headers and timestamp (`with_meta`). JSON text holds
no raw control character, so neither mark can be mistaken for data.

Its own module so that the stages and the code they wire in (pipelines.records.parse,
pipelines.lookups.enrichment) both read it without importing each other.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

DEAD_MARK = "\x00"  # a line that is a dead letter, not a record (SplitLines routes it)
# A record line may start with its input record's Kafka key, headers and timestamp:
# META key META headers META timestamp META json (see with_meta); the sink writes them
# (jars/src RecordSerializer). JSON text holds no raw control character, so neither mark
# can be mistaken for data.
META = "\x01"


def with_meta(key: bytes | None, headers: bytes | None, timestamp: int | None, text: str) -> str:
    """A record's JSON text with the Kafka metadata of the input record it came from."""
    k = "~" if key is None else base64.b64encode(key).decode()
    h = "" if headers is None else base64.b64encode(headers).decode()
    t = "" if timestamp is None or timestamp < 0 else str(timestamp)
    return f"{META}{k}{META}{h}{META}{t}{META}{text}"


def split_meta(line: str) -> tuple[str, str]:
    """(the metadata prefix, or "", the JSON text) of a record line."""
    if not line.startswith(META):
        return "", line
    text = line.split(META, 4)[4]
    return line[: len(line) - len(text)], text


def key_of(meta: str) -> bytes | None:
    """The Kafka key a metadata prefix (`split_meta`) carries; None when none."""
    if not meta:
        return None
    key = meta.split(META, 2)[1]
    return None if key == "~" else base64.b64decode(key)


def join_lines(texts: Iterable[str]) -> str:
    """A batch's records (JSON texts) as the one element a batched stage emits."""
    return "\n".join(texts)


def split_lines(batch: str) -> list[str]:
    return batch.split("\n")
