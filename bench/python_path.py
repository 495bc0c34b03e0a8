"""`python -m bench.python_path`: the Python work a record costs in the enrich and copy
stages, outside Flink, in microseconds a record.

The profile of enrich-5ms (`make profile`) shows the task thread's parse and the lookups'
loop taking turns under one GIL: every microsecond of Python a record costs there is on
the path that bounds the job. This measures that Python alone, on the benchmark's records
(`bench.compare.bench_values`), with the job's own settings and code, in four parts:

- `parse`: a batch of source rows (as thread mode hands them: columns) to records, as the
  flowing stage parses them (`RowParser.record`, Kafka metadata carried);
- `answers`: the service's answer to a batch read (`http_demo._answer`) from the bytes the
  demo service sends (`company_profile` for each record);
- `finish`: the answers merged and written (`RecordEnricher.many` over a client that hands
  back those answers without a round trip; `answers` is part of it);
- `join`: the batch's texts joined with their metadata into the one element it emits;
- `copy-json`: the validating copy's parse (`RowParser.text`) and join, for comparison.

No broker, no service, no JVM: a change to the data path's Python can be measured in a
second, before a `make bench` run says whether it moved the job.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.compare import bench_values
from pipelines.lookups.enrichment import enricher_for, rewrap
from pipelines.lookups.http_demo import _answer
from pipelines.records import jsontext
from pipelines.records.lines import join_lines
from pipelines.records.parse import RowParser
from pipelines.running import registry
from pipelines.settings.loader import load_settings
from pipelines_dev.enrichment_service import company_profile

PARTS = ("parse", "answers", "finish", "join", "copy-json")


class _Answers:
    """The demo client's answer to one batch, read from the bytes the service would send."""

    def __init__(self, body: bytes):
        self.body = body

    async def lookup_batch(self, records: list[dict]) -> list:
        return _answer(self.body, "bench")["results"]

    async def lookup(self, record: dict) -> dict:
        raise AssertionError("every record is answered in its batch")

    async def close(self) -> None:
        pass


def _columns(values: list[bytes]) -> tuple[list, ...]:
    """A batch as thread mode hands it to the stage: one list per source field."""
    rows = [("in", 0, i, 1_764_000_000_000 + i, None, v, None) for i, v in enumerate(values)]
    return tuple(list(column) for column in zip(*rows))


def measure(batch_size: int = 500, batches: int = 200) -> tuple[dict[str, float], str]:
    """Microseconds a record for each part (PARTS), and the last enriched batch's output."""
    enrich = load_settings("enrich", sections=registry.load("enrich").sections).settings
    copy = load_settings("passthrough", overrides=["parse.validate_records=true"]).settings
    values = bench_values(batch_size)
    columns = _columns(values)
    body = jsontext.dumps(
        {"results": [company_profile(jsontext.loads(v)["company"]) for v in values]}
    ).encode()
    parser = RowParser(
        enrich.parse, enrich.faults, "enrich", subtask=0, errors=enrich.errors, carry_metadata=True
    )
    enricher = enricher_for(enrich, lambda _settings: _Answers(body))
    copier = RowParser(copy.parse, copy.faults, "passthrough", subtask=0, errors=copy.errors)
    spent = dict.fromkeys(PARTS, 0.0)
    out = ""

    async def run() -> str:
        nonlocal out
        for _ in range(batches):
            t0 = time.perf_counter()
            metas, records = [], []
            for row in zip(*columns):
                got = parser.record(row)
                if isinstance(got, str):
                    raise AssertionError(f"a benchmark record was refused: {got[:200]}")
                metas.append(got[0])
                records.append(got[1])
            t1 = time.perf_counter()
            _answer(body, "bench")
            t2 = time.perf_counter()
            texts = await enricher.many(records)
            t3 = time.perf_counter()
            out = join_lines(map(rewrap, metas, texts))
            t4 = time.perf_counter()
            copied = [copier.text(row) for row in zip(*columns)]
            join_lines([got[0] + got[1] for got in copied if not isinstance(got, str)])
            t5 = time.perf_counter()
            for part, took in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                spent[part] += took
        return out

    asyncio.run(run())
    records = batch_size * batches
    return {part: took / records * 1e6 for part, took in spent.items()}, out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=500, help="the enrich job's batch_size")
    ap.add_argument("--batches", type=int, default=200)
    args = ap.parse_args(argv)
    per_record, _ = measure(args.batch_size, args.batches)
    enrich_path = per_record["parse"] + per_record["finish"] + per_record["join"]
    print(f"Python a record costs, batches of {args.batch_size} ({args.batches} batches):")
    for part in PARTS:
        print(f"  {part:10s} {per_record[part]:6.2f} us")
    print(f"  enrich     {enrich_path:6.2f} us (parse + finish + join)")


if __name__ == "__main__":
    main()
