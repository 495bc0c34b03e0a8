"""Flink's metric names as the REST API serves them, and the project's own gauges: the totals a
progress line shows."""

from __future__ import annotations

# Metric names: Flink 2.2 names a source's operator metrics `Source__<name>.<metric>` and a
# sink writer's `<name>__Writer.<metric>`; the project's own gauges (parse, enrich) are
# `<operator name>.<gauge>`.
SOURCE_RECORDS_OUT = ("Source__", ".numRecordsOut")
SINK_RECORDS_SENT = ("__Writer.numRecordsSend",)
DEAD_LETTER_SINKS = ("dead-letter-sink__", "late-sink__")
# The project's gauges, one list: the enrichment stage registers these (EnrichStats.NAMES).
PROJECT_GAUGES = (
    "lookups",
    "lookupFailures",
    "retries",
    "markedMissing",
    "deadLetters",
    "unexpectedErrors",
)


def metric_totals(get, base: str) -> dict[str, int]:
    """Totals over a vertex's subtasks, from its REST metrics `base` URL: `in` (records the
    sources emitted), `out` (records the main sinks sent; dead-letter and late sinks are
    counted by the gauges instead), and each project gauge by name."""
    names = [m["id"] for m in get(base)]
    wanted: dict[str, str] = {}
    for name in names:
        if name.startswith(SOURCE_RECORDS_OUT[0]) and name.endswith(SOURCE_RECORDS_OUT[1]):
            wanted[name] = "in"
        elif name.endswith(SINK_RECORDS_SENT[0]) and not name.startswith(DEAD_LETTER_SINKS):
            wanted[name] = "out"
        elif name.rpartition(".")[2] in PROJECT_GAUGES and "__" not in name:
            wanted[name] = name.rpartition(".")[2]
    totals: dict[str, int] = {}
    if wanted:
        for item in get(f"{base}?get={','.join(wanted)}&agg=sum"):
            key = wanted[item["id"]]
            totals[key] = totals.get(key, 0) + int(float(item.get("sum", 0)))
    return totals
