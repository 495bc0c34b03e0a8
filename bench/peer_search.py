"""`python -m bench.peer_search`: the peers' best settings, found the way project-tuned's were.

Each peer's knobs for each kind of case, every candidate run once over the same input on
the same broker and service (`make bench`'s `measure`, a smaller record count), ranked by
rate. The best of each goes into `bench.compare.PEER_TUNED` by hand, with this table
committed beside it (bench/results/peer-search.{txt,json}): `quix-tuned` and `bytewax` in
`make bench` are these settings.

- Quix: the commit interval (1 s, as the jobs checkpoint in the benchmark, or 5 s); for
  enrichment, the count window (100, 250 or 500 records per key: they divide every case's
  records per key) and the lookup pattern (one POST per window, or a GET per record with a
  window's GETs concurrent on a thread pool).
- Bytewax: records per source poll and worker threads (1 or 3: one per partition).
- Bytewax as an expert writes it (`bytewax-tuned`, bench/peers/bytewax_lean.py): processes
  (1 to 3), records per source poll, and for enrichment records per lookup batch and
  lookups in flight per process. Its best go into `bench.compare.LEAN_BYTEWAX`.

`--peers bytewax-tuned --label NAME` writes peer-search-NAME.* beside the others' table;
`--records` sizes every kind's input (the lean peer needs more to run for long enough).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace

from bench.compare import (
    LEAN_BYTEWAX,
    PEER_TUNED,
    RESULTS,
    Case,
    broker_and_service,
    deadline_s,
    fill_input,
    measure,
    stop_on_signals,
)
from pipelines_dev.topics import delete_topics

CASES = {
    "copy-bytes": Case("copy-bytes", "copy-bytes", 600_000),
    "copy-json": Case("copy-json", "copy-json", 400_000),
    "enrich": Case("enrich-50ms", "enrich", 40_000, 50),
}


def candidates(peer: str, kind: str) -> list[list[str]]:
    """Every setting of `peer` tried for a kind of case (the empty list: its defaults)."""
    if peer == "bytewax-tuned":
        if kind == "enrich":
            return [
                ["--processes", n, "--batch", "10000", "--lookup-batch", b, "--in-flight", f]
                for n in ("1", "2")
                for b in ("500", "1000")
                for f in ("16", "32", "64")
            ]
        return [
            ["--processes", n, "--batch", b]
            for n in ("1", "2", "3")
            for b in ("5000", "10000", "20000")
        ]
    if peer == "quix":
        commits = [["--commit-interval", "1"], ["--commit-interval", "5"]]
        if kind != "enrich":
            return commits
        return [
            ["--window", window, "--lookup", lookup]
            for window in ("100", "250", "500")
            for lookup in ("batch", "gets")
        ] + [["--window", "500", "--commit-interval", "5"]]
    batches = ("200", "500", "1000") if kind == "enrich" else ("1000", "5000")
    return [["--batch", b, "--workers", w] for b in batches for w in ("1", "3")]


def main(argv: list[str] | None = None) -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", default="quix,bytewax")
    parser.add_argument("--kinds", default=",".join(CASES))
    parser.add_argument("--records", type=int, help="records for every kind's input")
    parser.add_argument("--label", help="write peer-search-LABEL.* instead of peer-search.*")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    with broker_and_service(50) as (broker, service):
        for kind in args.kinds.split(","):
            case = CASES[kind]
            if args.records:
                case = replace(case, records=args.records)
            source = fill_input(case, broker.bootstrap)
            try:
                for peer in args.peers.split(","):
                    system = "quix-tuned" if peer == "quix" else peer
                    for settings in candidates(peer, kind):
                        if peer == "bytewax-tuned":
                            LEAN_BYTEWAX[kind] = settings
                        else:
                            PEER_TUNED[peer][kind] = settings
                        run = measure(
                            case,
                            system,
                            1,
                            broker.bootstrap,
                            service.url,
                            deadline_s(case),
                            source,
                        )
                        row = {"kind": kind, "peer": peer, "settings": " ".join(settings)}
                        rows.append({**row, **asdict(replace(run, case=case.name))})
                        rate = f"{run.rate:,.0f}/s" if run.rate else "-"
                        print(f"{kind:11} {peer:13} {row['settings']:40} {rate:>12} {run.error}")
                        sys.stdout.flush()
            finally:
                delete_topics(broker.bootstrap, [source])
    lines = [f"{'kind':11} {'peer':13} {'settings':40} {'records/s':>10}  notes", "-" * 80]
    name = f"peer-search-{args.label}" if args.label else "peer-search"
    for row in sorted(rows, key=lambda r: (r["kind"], r["peer"], -(r["rate"] or 0))):
        rate = f"{row['rate']:,.0f}" if row["rate"] else "-"
        lines.append(
            f"{row['kind']:11} {row['peer']:13} {row['settings']:40} {rate:>10}  {row['error']}"
        )
    text = "\n".join(lines)
    print(text)
    (RESULTS / f"{name}.txt").write_text(text + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
