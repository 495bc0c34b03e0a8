"""Raw Kafka records -> JSON records, and everything else -> the dead-letter topic.

A malformed record must neither crash the job (a poison pill restarts it forever) nor
vanish: it goes to the dead-letter topic with its original bytes, the error, and its
topic, partition and offset, so it can be found, fixed and replayed.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

from pipelines.settings import FaultSettings, ParseSettings

DEAD_LETTER_TAG = "dead-letters"


def parse_value(value: bytes | None, required: list[str],
                event_time_field: str | None = None) -> tuple[dict | None, str | None]:
    """(record, None) when valid; (None, reason) otherwise."""
    if value is None:
        return None, "empty record (null value)"
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8: {exc.reason} at byte {exc.start}"
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if not isinstance(record, dict):
        return None, f"not a JSON object: {type(record).__name__}"
    missing = [f for f in required if f not in record]
    if missing:
        return None, f"missing required field(s): {', '.join(missing)}"
    if event_time_field is not None:
        ts = record.get(event_time_field)
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            return None, f"{event_time_field} is not epoch milliseconds: {ts!r}"
    return record, None


def dead_letter(row, reason: str, job: str) -> str:
    """The dead-letter message: original bytes (base64) plus reason and origin."""
    value = bytes(row.value) if row.value is not None else None
    key = bytes(row.key) if row.key is not None else None
    preview = value.decode("utf-8", errors="replace")[:200] if value is not None else None
    return json.dumps({
        "error": reason,
        "job": job,
        "origin": {"topic": row.topic, "partition": row.partition, "offset": row.offset,
                   "timestamp": row.timestamp},
        "key_b64": base64.b64encode(key).decode() if key is not None else None,
        "value_b64": base64.b64encode(value).decode() if value is not None else None,
        "value_preview": preview,
    }, sort_keys=True)


class InjectedFault(RuntimeError):
    """Raised once by fault injection; the restart strategy must recover the job."""


def make_parse_function(parse: ParseSettings, faults: FaultSettings, job: str,
                        event_time_field: str | None = None, batched: bool = False,
                        trace_timing: bool = False):
    """A ProcessFunction: valid records downstream as JSON text, bad ones to the side output.

    With `batched`, each input element is a list of rows and each output element is a JSON
    list of the valid records among them (bad ones still go out one by one).
    """
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    from pyflink.datastream.functions import ProcessFunction

    tag = OutputTag(DEAD_LETTER_TAG, Types.STRING())

    class Parse(ProcessFunction):
        def open(self, runtime_context):
            self.seen = 0
            self.subtask = runtime_context.get_index_of_this_subtask()

        def _one(self, row, good: list):
            self.seen += 1
            if faults.fail_after_records and self.seen >= faults.fail_after_records:
                _maybe_fail(faults, self.subtask)
            record, reason = parse_value(row.value, parse.required_fields, event_time_field)
            if record is None:
                return dead_letter(row, reason, job)
            record["source"] = {"topic": row.topic, "partition": row.partition,
                                "offset": row.offset}
            if trace_timing:
                record["_timing"] = {"in": time.time() * 1000}
            good.append(record)
            return None

        def process_element(self, value, ctx):
            good: list[dict] = []
            for row in (value if batched else (value,)):
                bad = self._one(row, good)
                if bad is not None:
                    yield tag, bad
            if batched and good:
                yield json.dumps(good, sort_keys=True)
            elif good:
                yield json.dumps(good[0], sort_keys=True)

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
    raise InjectedFault(f"injected fault after {faults.fail_after_records} records "
                        f"(subtask {subtask})")
