"""Raw Kafka records -> JSON records, and everything else -> the dead-letter topic.

A malformed record must neither crash the job (a poison pill restarts it forever) nor
vanish: it goes to the dead-letter topic with its original bytes, the error, and its
topic, partition and offset, so it can be found, fixed and replayed. Nothing a record
carries can raise out of here: invalid UTF-8, a null value, JSON nested deeper than the
parser's recursion limit, numbers too long to convert, NaN, non-objects, null or
mistyped required fields. A dead letter never outweighs what the sink can write: an
original too large for it is cut, with its full size and SHA-256 kept.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import cast

from pipelines.flink.rows import column_rows, is_thread_mode, row_fields, subtask_index
from pipelines.records import jsontext
from pipelines.records.lines import join_lines, with_meta
from pipelines.settings import ErrorSettings, FaultSettings, FieldType, ParseSettings

DEAD_LETTER_TAG = "dead-letters"
# Room in a dead-letter message for everything but the original bytes (reason, origin,
# preview, JSON and Kafka record overhead): measured well under 10 KiB.
DEAD_LETTER_OVERHEAD = 16_384
PREVIEW_CHARS = 200
JAVA_LONG_END = 1 << 63  # event times are Java longs in the JVM
REASON_CHARS = 1_000

_TYPES: dict[FieldType, tuple[type, ...]] = {
    FieldType.STRING: (str,),
    FieldType.INTEGER: (int,),
    FieldType.NUMBER: (int, float),
    FieldType.BOOLEAN: (bool,),
    FieldType.OBJECT: (dict,),
    FieldType.ARRAY: (list,),
}


# Exact types a required field's value may have to pass without a closer look (every
# value orjson and json make is of one of them). Anything else, a float for `number`
# included, goes through field_problem, which decides and says why.
_PLAIN: dict[FieldType, tuple[type, ...]] = {
    FieldType.STRING: (str,),
    FieldType.INTEGER: (int,),  # not bool: type(True) is bool
    FieldType.NUMBER: (int,),  # floats: field_problem checks they are finite
    FieldType.BOOLEAN: (bool,),
    FieldType.OBJECT: (dict,),
    FieldType.ARRAY: (list,),
}


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def loads_strict(text: str):
    """json.loads that refuses NaN/Infinity (other consumers cannot read them back)."""
    return json.loads(text, parse_constant=_reject_constant)


def field_problem(record: dict, name: str, wanted: FieldType) -> str | None:
    if name not in record:
        return "missing"
    value = record[name]
    if value is None:
        return "null"
    if wanted is FieldType.ANY:
        return None
    ok = isinstance(value, _TYPES[wanted])
    if wanted in (FieldType.INTEGER, FieldType.NUMBER) and isinstance(value, bool):
        ok = False
    if wanted is FieldType.NUMBER and isinstance(value, float) and not math.isfinite(value):
        ok = False
    return None if ok else f"{type(value).__name__}, not {wanted.value}"


def origin_block(topic: str, partition: int, offset: int, timestamp: int) -> dict:
    """Where a record came from, as records (`parse.origin_field`) and dead letters carry it:
    enough to find it again and replay it."""
    return {"topic": topic, "partition": partition, "offset": offset, "timestamp": timestamp}


def parse_value(
    value: bytes | None,
    required: dict[str, FieldType] | list[str],
    event_time_field: str | None = None,
    origin_field: str | None = None,
    max_future_skew: int | None = None,
) -> tuple[dict, None] | tuple[None, str]:
    """(record, None) when valid; (None, reason) otherwise. Never raises for any bytes.
    Valid means readable by every later stage, the JVM's included (jsontext.jvm_problem)."""
    if value is None:
        return None, "empty record (null value)"
    data = value if isinstance(value, bytes) else bytes(value)
    exact = True
    try:
        record = jsontext.loads_fast(data)
    except jsontext.DecodeError:
        exact = False
        record, reason = _parse_slowly(data)
        if reason is not None:
            return None, reason
    problem = jsontext.jvm_problem(record, len(data), exact)
    if problem is not None:
        return None, f"not usable downstream: {problem}"
    return check_record(record, required, event_time_field, origin_field, max_future_skew)


def _parse_slowly(value: bytes) -> tuple[object, str | None]:
    """The standard library's verdict (and reason) on what orjson refused."""
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8: {exc.reason} at byte {exc.start}"
    try:
        record = loads_strict(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        return None, "not parseable: JSON nested deeper than the parser's recursion limit"
    except ValueError as exc:  # NaN/Infinity, integers longer than Python converts
        return None, f"not parseable: {str(exc)[:REASON_CHARS]}"
    return record, None


def check_record(
    record,
    required: dict[str, FieldType] | list[str],
    event_time_field: str | None = None,
    origin_field: str | None = None,
    max_future_skew: int | None = None,
) -> tuple[dict, None] | tuple[None, str]:
    """A parsed value against the rules: (record, None) when valid, else (None, reason).
    An event time more than `max_future_skew` ms ahead of now would move the watermark
    past every later record of its partition: it is refused like a malformed one."""
    if not isinstance(record, dict):
        return None, f"not a JSON object: {type(record).__name__}"
    if isinstance(required, list):
        required = {name: FieldType.ANY for name in required}
    problems = {}
    for name, wanted in required.items():
        value = record.get(name)
        if value is not None and (wanted is FieldType.ANY or type(value) in _PLAIN[wanted]):
            continue  # the common case, decided without a call
        why = field_problem(record, name, wanted)
        if why is not None:
            problems[name] = why
    if problems:
        missing = [name for name, why in problems.items() if why == "missing"]
        if missing:
            return None, f"missing required field(s): {', '.join(missing)}"
        wrong = "; ".join(f"{name} is {why}" for name, why in problems.items())
        return None, f"required field(s) not usable: {wrong}"
    if event_time_field is not None:
        ts = record.get(event_time_field)
        if isinstance(ts, bool) or not isinstance(ts, int) or not 0 <= ts < JAVA_LONG_END:
            return None, f"{event_time_field} is not epoch milliseconds: {ts!r}"[:REASON_CHARS]
        if max_future_skew is not None:
            ahead = ts - int(time.time() * 1000)
            if ahead > max_future_skew:
                return None, (
                    f"{event_time_field} {ts} is {ahead} ms ahead of processing time, more than "
                    f"watermarks.max_future_skew ({max_future_skew} ms): it would make every "
                    f"later record of its partition late"
                )
    if origin_field is not None and origin_field in record:
        return None, (
            f"field {origin_field!r} is reserved for the record's origin "
            f"(parse.origin_field); rename it in the data or set parse.origin_field"
        )
    return record, None


def _kept(data: bytes | None, budget: int, prefix: str) -> tuple[dict, int]:
    """The dead-letter fields for one original: all of it when it fits `budget` bytes,
    else its first `budget` bytes; size and digest always. Returns (fields, bytes used)."""
    if data is None:
        return {f"{prefix}_b64": None}, 0
    kept = data[: max(budget, 0)]
    fields = {
        f"{prefix}_b64": base64.b64encode(kept).decode(),
        f"{prefix}_size": len(data),
        f"{prefix}_sha256": hashlib.sha256(data).hexdigest(),
    }
    if len(kept) < len(data):
        fields[f"{prefix}_truncated"] = True
    return fields, len(kept)


def source_fields(row) -> tuple:
    """(topic, partition, offset, timestamp, key, value) of a source record: by name from
    PyFlink's Row (process mode) or Beam's Kafka row, by position from what thread mode
    hands over (flink/rows.py row_fields; the source's field order)."""
    if hasattr(row, "value"):
        return row.topic, row.partition, row.offset, row.timestamp, row.key, row.value
    return tuple(row_fields(row)[:6])


def dead_letter(
    row, reason: str, job: str, max_bytes: int = 1_048_576, stage: str = "parse"
) -> str:
    """The dead-letter message for an original Kafka record: its bytes (base64, cut to fit
    `max_bytes` with size and SHA-256 kept), a preview, the reason and the origin."""
    topic, partition, offset, timestamp, key, value = source_fields(row)
    value = bytes(value) if value is not None else None
    key = bytes(key) if key is not None else None
    room = max((max_bytes - DEAD_LETTER_OVERHEAD) * 3 // 4, 0)  # base64: 4 chars per 3 bytes
    key_fields, used = _kept(key, min(room, 65_536), "key")
    value_fields, _ = _kept(value, room - used, "value")
    preview = (
        value[: PREVIEW_CHARS * 4].decode("utf-8", errors="replace")[:PREVIEW_CHARS]
        if value is not None
        else None
    )
    return json.dumps(
        {
            "error": reason[:REASON_CHARS],
            "job": job,
            "stage": stage,
            "origin": origin_block(topic, partition, offset, timestamp),
            **key_fields,
            **value_fields,
            "value_preview": preview,
        },
        sort_keys=True,
    )


def record_dead_letter(
    record: dict, reason: str, job: str, stage: str, origin_field: str | None, max_bytes: int
) -> str:
    """The dead-letter message for a parsed record that a later stage could not handle:
    the record as it came in (its origin block moved out), cut to fit `max_bytes`."""
    record = dict(record)
    origin = record.pop(origin_field, None) if origin_field else None
    original = json.dumps(record, sort_keys=True).encode()
    room = max((max_bytes - DEAD_LETTER_OVERHEAD) * 3 // 4, 0)
    fields, _ = _kept(original, room, "value")
    return json.dumps(
        {
            "error": reason[:REASON_CHARS],
            "job": job,
            "stage": stage,
            "origin": origin,
            "key_b64": None,
            **fields,
            "value_preview": original[:PREVIEW_CHARS].decode("utf-8", "replace"),
        },
        sort_keys=True,
    )


class UnexpectedErrors(RuntimeError):
    """Too many records in a row failed with unexpected exceptions: a bug, not bad data."""


class ErrorBudget:
    """Tells one bad record from a bug. A record that raises something unexpected goes to
    dead letters; `limit` such records in a row, none getting through in between, means
    the code (or its configuration) is wrong for every record, and the job must fail
    rather than dead-letter the whole stream."""

    def __init__(self, settings: ErrorSettings, stage: str):
        self.limit = settings.max_unexpected_in_a_row
        self.stage = stage
        self.in_a_row = 0
        self.total = 0

    def ok(self) -> None:
        self.in_a_row = 0

    def failed(self, exc: BaseException) -> str:
        """Count one unexpected failure; its dead-letter reason, or raise when it is a bug."""
        self.in_a_row += 1
        self.total += 1
        reason = f"unexpected error in {self.stage}: {type(exc).__name__}: {exc}"[:REASON_CHARS]
        if self.in_a_row >= self.limit:
            raise UnexpectedErrors(
                f"{self.in_a_row} records in a row failed in {self.stage} with unexpected "
                f"errors (errors.max_unexpected_in_a_row={self.limit}); the last: {reason}"
            ) from exc
        return reason


class InjectedFault(RuntimeError):
    """Raised once by fault injection; the restart strategy must recover the job."""


class RowParser:
    """One Kafka row to its record or its dead letter: the parse stage's logic without
    PyFlink, so that a Python stage which parses and then does more (the enrichment
    stage's batched operator) parses exactly as `parse` does, in the same worker call.
    Dead letters name `stage`, so a job that parses twice tells its parses apart."""

    def __init__(
        self,
        parse: ParseSettings,
        faults: FaultSettings,
        job: str,
        *,
        subtask: int,
        event_time_field: str | None = None,
        errors: ErrorSettings | None = None,
        dead_letter_max_bytes: int = 1_048_576,
        extra_required: dict[str, FieldType] | None = None,
        carry_metadata: bool = False,
        max_future_skew: int | None = None,
        stage: str = "parse",
    ):
        self.required = {**parse.required_fields, **(extra_required or {})}
        self.origin_field = parse.origin_field
        self.faults = faults
        self.job = job
        self.subtask = subtask
        self.event_time_field = event_time_field
        self.budget = ErrorBudget(errors or ErrorSettings(), stage)
        self.dead_letter_max_bytes = dead_letter_max_bytes
        self.carry_metadata = carry_metadata
        self.max_future_skew = max_future_skew
        self.stage = stage
        self.seen = 0
        self.dead = 0
        # The required fields as the quick path checks them (None: a type it leaves to
        # check_record), or None where every record needs check_record (event times).
        self.quick_required: tuple[tuple[str, tuple[type, ...] | None], ...] | None = (
            tuple(
                (name, None if wanted is FieldType.ANY else _PLAIN[wanted])
                for name, wanted in self.required.items()
            )
            if event_time_field is None and max_future_skew is None
            else None
        )

    def record(self, row) -> tuple[str, dict] | str:
        """(its metadata prefix, or "", the record) of a valid row; else its dead letter."""
        return self._parse(row, as_text=False)

    def text(self, row) -> tuple[str, str] | str:
        """(its metadata prefix, or "", the record's JSON text) of a valid row; else its
        dead letter."""
        return self._parse(row, as_text=True)

    def quick(self, value) -> dict | None:
        """The record of a value that is valid at a glance (a small flat object with every
        required field present and of a plain type), exactly as parse_value would return
        it; None for anything else, which parse_value then decides and explains. Most
        records take this path: one call and a few type checks, where parse_value makes
        four (the enrich stage's parse 4.1 -> 3.0 us a record: bench.python_path)."""
        required = self.quick_required
        if required is None or type(value) is not bytes:
            return None
        record = jsontext.loads_flat(value)
        if record is None:
            return None
        for name, plain in required:
            item = record.get(name)
            if item is None or (plain is not None and type(item) not in plain):
                return None
        if self.origin_field is not None and self.origin_field in record:
            return None
        return record

    def _parse(self, row, as_text: bool):
        self.seen += 1
        faults = self.faults
        if faults.fail_after_records and self.seen >= faults.fail_after_records:
            _maybe_fail(faults, self.subtask)
        try:
            # One unpacking: PyFlink's Row resolves each attribute by name (~0.8 us each).
            topic, partition, offset, timestamp, key, value, headers = row_fields(row)
            record = self.quick(value)
            if record is None:
                record, reason = parse_value(
                    value,
                    self.required,
                    self.event_time_field,
                    self.origin_field,
                    self.max_future_skew,
                )
            if record is not None:
                if self.origin_field:
                    record[self.origin_field] = origin_block(topic, partition, offset, timestamp)
                meta = with_meta(key, headers, timestamp, "") if self.carry_metadata else ""
                out = jsontext.dumps(record) if as_text else record
        except InjectedFault:
            raise
        except Exception as exc:  # noqa: BLE001 - one record's surprise is not the job's
            reason = self.budget.failed(exc)
            record = None
        if record is None:
            self.dead += 1
            # parse_value gives (None, reason), the budget a reason: always a str here
            return dead_letter(
                row, cast(str, reason), self.job, self.dead_letter_max_bytes, self.stage
            )
        self.budget.ok()
        return meta, out


def make_parse_function(
    parse: ParseSettings,
    faults: FaultSettings,
    job: str,
    *,
    columns: bool = False,
    **options,
):
    """A ProcessFunction over `RowParser`: valid records downstream as JSON text, bad ones
    to the side output; `options` are RowParser's (one is made here, so that a wrong one
    fails while the job is built, not on the worker). With `carry_metadata` a record's
    text is prefixed with its Kafka key, headers and timestamp (pipelines.records.lines.with_meta).

    Each input element is a batch, a list of rows, and each output element is the valid
    records among them, one JSON text per line (bad ones go out one by one); with
    `columns`, each input element is a batch as one row of columns (thread mode:
    flink/rows.py column_rows).
    """
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    from pyflink.datastream.functions import ProcessFunction

    tag = OutputTag(DEAD_LETTER_TAG, Types.STRING())
    RowParser(parse, faults, job, subtask=0, **options)

    class Parse(ProcessFunction):
        def open(self, runtime_context):
            subtask = subtask_index(runtime_context)
            self.parser = RowParser(parse, faults, job, subtask=subtask, **options)
            group = runtime_context.get_metrics_group()
            self.dead_count = None
            if is_thread_mode(runtime_context):  # no gauges there: flink/rows.py is_thread_mode
                self.dead_count = group.counter("deadLetters")
            else:
                group.gauge("deadLetters", lambda: self.parser.dead)

        def process_element(self, value, ctx):
            good: list[str] = []
            text = self.parser.text
            rows = column_rows(value) if columns else value
            for row in rows:
                got = text(row)
                if isinstance(got, str):
                    if self.dead_count is not None:
                        self.dead_count.inc()
                    yield tag, got
                else:
                    good.append(got[0] + got[1])
            if good:
                yield join_lines(good)  # one element a batch: see pipelines.stages

    return Parse(), tag


def _maybe_fail(faults: FaultSettings, subtask: int) -> None:
    """Fail once per marker directory (a restart would otherwise fail again forever)."""
    marker_dir = Path(faults.marker_dir or "/tmp")
    marker = marker_dir / f"fault-fired-{subtask}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    raise InjectedFault(
        f"injected fault after {faults.fail_after_records} records (subtask {subtask})"
    )
