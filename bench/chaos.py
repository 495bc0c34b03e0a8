"""`make chaos`: every fault of pipelines_dev.faults, several trials each, for the enrich
job (lookups at 20 ms) and passthrough, on the production-shaped cluster; results as JSON
(every trial, with its events) and a table (per job and fault: trials, records, lost,
duplicated, recovery median / max) in bench/results/, the table copied into docs/exactly-once.md.

`--smoke`: each fault once on passthrough with fewer records (what `make test` runs, as
tests in tests/integration/test_topology.py), results to .local/chaos-smoke.*. Trials print
their seed: `--faults F --seed S --trials 1` replays one.

It uses the default topology (`pipelines-dev topology`), reusing one that is up and healthy,
and takes it down at the end of a full run, also when interrupted.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

from bench.compare import page_with_table, stop_on_signals
from pipelines.host.paths import local_state
from pipelines_dev.faults import ALL_FAULTS, Result, run_trial
from pipelines_dev.topology import Topology

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "exactly-once.md"  # its results block holds chaos.txt
BLOCK = ("<!-- chaos:results -->\n```\n", "```\n<!-- /chaos:results -->")


def table(results: list[Result]) -> str:
    rows = [
        f"{'job':12} {'fault':22} {'trials':>6} {'records':>9} {'lost':>5} {'dup':>5} "
        f"{'dlq ok':>6} {'order':>5} {'aborted':>7} {'recovery s (median / max)':>26} {'exits':>5} {'ok':>3}"
    ]
    keys = sorted(
        {(r.job, r.fault) for r in results}, key=lambda k: (k[0], list(ALL_FAULTS).index(k[1]))
    )
    for job, fault in keys:
        group = [r for r in results if (r.job, r.fault) == (job, fault)]
        recoveries = [r.recovery_s for r in group if r.recovery_s is not None]
        rec = f"{statistics.median(recoveries):.1f} / {max(recoveries):.1f}" if recoveries else "-"
        dlq_ok = sum(r.dead_letters == r.dead_letters_expected for r in group)
        rows.append(
            f"{job:12} {fault:22} {len(group):>6} {sum(r.records for r in group):>9,} "
            f"{sum(r.lost for r in group):>5} {sum(r.duplicated for r in group):>5} "
            f"{dlq_ok:>3}/{len(group):<2} {sum(r.order_violations for r in group):>5} "
            f"{sum(r.aborted_reads for r in group):>7} {rec:>26} "
            f"{sum(sum(r.exited.values()) for r in group):>5} "
            f"{'yes' if all(r.ok for r in group) else 'NO':>3}"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()  # the `finally` below removes the topology
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--smoke", action="store_true", help="each fault once, passthrough, fewer records"
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--jobs", default="enrich,passthrough")
    parser.add_argument("--faults", help="comma-separated (default: all)")
    parser.add_argument("--seed", type=int, help="the first trial's seed (default: random)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the trials bench/results/chaos.json already holds and run only the others",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="only write the table of the trials in bench/results/chaos.json (and docs/exactly-once.md's)",
    )
    args = parser.parse_args(argv)
    if args.report:
        text = table(recorded("chaos"))
        print(text)
        (RESULTS / "chaos.txt").write_text(text + "\n")
        PAGE.write_text(page_with_table(PAGE.read_text(), text, BLOCK))
        return 0
    rate = 1500.0  # records a second: 50,000 take ~35 s, so every fault lands mid-stream
    if args.smoke:
        args.trials, args.records, args.jobs = 1, min(args.records, 3000), "passthrough"
        rate = 150.0
    faults = args.faults.split(",") if args.faults else list(ALL_FAULTS)
    unknown = set(faults) - set(ALL_FAULTS)
    if unknown:
        parser.error(f"unknown fault(s) {sorted(unknown)}; known: {', '.join(ALL_FAULTS)}")
    seeds = random.Random(args.seed if args.seed is not None else time.time_ns())
    topology = Topology()
    state = topology.up(wait_s=420)
    print(f"chaos    topology up ({state.get('started_s', 'reused')} s): {topology.summary()}")
    results: list[Result] = []
    name = "chaos-smoke" if args.smoke else "chaos"
    if args.resume and (RESULTS / f"{name}.json").is_file():
        results = recorded(name)
        print(f"chaos    resuming: {len(results)} trials kept")
    done = {(r.job, r.fault, r.trial) for r in results}
    try:
        for trial in range(1, args.trials + 1):
            for job in args.jobs.split(","):
                for fault in faults:
                    seed = seeds.randrange(1 << 31)
                    if (job, fault, trial) in done:
                        continue
                    print(f"chaos    {job} {fault} trial {trial} seed {seed} ...", flush=True)
                    result = run_trial(topology, job, fault, args.records, seed, trial,
                                       rate=rate, keep_dir=local_state(f"{name}-failed"))  # fmt: skip
                    results.append(result)
                    print(
                        f"chaos    {job} {fault} trial {trial}: output {result.output}, lost "
                        f"{result.lost}, duplicated {result.duplicated}, dead letters "
                        f"{result.dead_letters}/{result.dead_letters_expected}, recovery "
                        f"{result.recovery_s} s, {'ok' if result.ok else 'NOT OK'}"
                        + (f", exited by themselves: {result.exited}" if result.exited else "")
                        + (f" ({result.error})" if result.error else "")
                        + (f"; logs kept in {result.kept}" if result.kept else ""),
                        flush=True,
                    )
                    _write(name, results)
    finally:
        if not args.smoke:
            topology.down()
    text = table(results)
    print(text)
    _write(name, results, text)
    if not args.smoke:
        PAGE.write_text(page_with_table(PAGE.read_text(), text, BLOCK))
    return 0 if all(r.ok for r in results) else 1


def recorded(name: str) -> list[Result]:
    """The trials bench/results/<name>.json holds (`ok` is derived, not stored back)."""
    kept = json.loads((RESULTS / f"{name}.json").read_text())
    return [Result(**{k: v for k, v in r.items() if k != "ok"}) for r in kept]


def _write(name: str, results: list[Result], text: str | None = None) -> None:
    """Every trial so far (written after each, so an interrupted run keeps them): the full
    run's into bench/results (committed), a smoke's into .local (not)."""
    from pipelines.host.paths import local_state

    out = local_state() if name.endswith("smoke") else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps([r.as_dict() for r in results], indent=1) + "\n")
    if text is not None:
        (out / f"{name}.txt").write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
