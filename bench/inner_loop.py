"""`make bench-inner-loop`: how long a job's `pipelines.testing` test takes, the first of a
test session and each one after it, the loop a team runs while it changes a job.

Each mode runs in a fresh Python process, so its first run pays for the JVM as a test
session's first test does: RUNS calls of `pipelines.testing.run`, cycling through the three
jobs' logic-test inputs (passthrough; windowed with a malformed record; enrich with a test
double for its client), each timed on its own. Two modes, measured in the same run:

- `shared` (what `pipelines.testing` does): one mini-cluster in the process's JVM, started
  by the first run and reused, the Python operators in threads of the test process;
- `own` (`testing.SHARED_CLUSTER = False`, PyFlink's local target): a mini-cluster started
  and stopped around every run.

No Kafka, no service. Results: a table on stdout, bench/results/inner-loop.json and .txt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from pipelines.host.paths import PROJECT_ROOT
from pipelines.running.processes import ProcessGroups

RESULTS = PROJECT_ROOT / "bench" / "results"
MODES = ("shared", "own")


class Double:
    """The enrich job's client replaced, as a team's logic test replaces it."""

    async def lookup(self, record: dict) -> dict:
        return {"tier": "gold"}

    async def close(self) -> None:
        pass


def double(settings) -> Double:
    return Double()


def _cases():
    from pipelines import testing

    windowed: list[dict | bytes] = [
        {"id": 1, "key": "a", "ts": 1_000},
        {"id": 2, "key": "b", "ts": 3_000},
        b"{not json",
        {"id": 3, "key": "a", "ts": 25_000},
    ]
    return [
        ("passthrough", lambda: testing.run("passthrough", [b"a", b"b", None])),
        ("windowed", lambda: testing.run("windowed", windowed)),
        (
            "enrich",
            lambda: testing.run(
                "enrich", [{"id": 1, "company": "Acme"}, b"{not json"], lookup_client=double
            ),
        ),
    ]


def child(mode: str, runs: int) -> None:
    """One mode's runs, in this (fresh) process: a JSON line per run on stdout."""
    started = time.monotonic()
    from pipelines import testing
    from pipelines.flink.gateway import disconnect_gateway, gateway_in_group

    testing.SHARED_CLUSTER = mode == "shared"
    imported = time.monotonic() - started
    cases = _cases()
    owner = ProcessGroups()
    # The gateway JVM as a test session starts it (tests/conftest.py): owned, with the
    # class archive `pipelines jars` built.
    try:
        with gateway_in_group(owner):
            _timed(mode, runs, cases, imported)
    finally:
        disconnect_gateway()
        owner.end()


def _timed(mode: str, runs: int, cases, imported: float) -> None:
    for i in range(runs):
        job, call = cases[i % len(cases)]
        began = time.monotonic()
        out = call()
        assert out.written, f"{job}: nothing written"
        line = {"mode": mode, "run": i, "job": job, "s": time.monotonic() - began}
        if i == 0:
            line["import_s"] = imported
        print(json.dumps(line), flush=True)


def measure(mode: str, runs: int) -> list[dict]:
    """One mode in a fresh process, in a process group owned here (its gateway JVM is in
    it too): ended on every path."""
    owner = ProcessGroups()
    try:
        proc = owner.popen(
            [sys.executable, "-m", "bench.inner_loop", "--child", mode, "--runs", str(runs)],
            cwd=PROJECT_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=120 + 30 * runs)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{mode}: no result within {120 + 30 * runs} s") from None
    finally:
        owner.end()
    lines = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or len(lines) != runs:
        raise SystemExit(f"{mode}: exit {proc.returncode}\n{stderr[-3000:]}")
    return lines


def summary(lines: list[dict]) -> dict:
    later = [x["s"] for x in lines[1:]]
    return {
        "mode": lines[0]["mode"],
        "import_s": round(lines[0]["import_s"], 2),
        "first_s": round(lines[0]["s"], 2),
        "later_median_s": round(statistics.median(later), 2),
        "later_max_s": round(max(later), 2),
        "later_runs": len(later),
        "by_job_median_s": {
            job: round(statistics.median([x["s"] for x in lines[1:] if x["job"] == job]), 2)
            for job in dict.fromkeys(x["job"] for x in lines[1:])
        },
    }


def table(rows: list[dict]) -> str:
    head = (
        f"{'mode':<8} {'import':>7} {'first':>7} {'later p50':>10} {'later max':>10}  by job (p50)"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        jobs = ", ".join(f"{job} {s:.2f}" for job, s in r["by_job_median_s"].items())
        out.append(
            f"{r['mode']:<8} {r['import_s']:>6.2f}s {r['first_s']:>6.2f}s "
            f"{r['later_median_s']:>9.2f}s {r['later_max_s']:>9.2f}s  {jobs}"
        )
    shared, own = rows
    out.append(
        f"\nlater runs: own / shared = {own['later_median_s'] / shared['later_median_s']:.1f}x "
        f"(median of {shared['later_runs']} each, same run)"
    )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per mode (default 10)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.runs)
        return
    if args.runs < 2:
        parser.error("--runs: at least 2 (the first and one after it)")
    rows = [summary(measure(mode, args.runs)) for mode in MODES]
    text = table(rows)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "inner-loop.json").write_text(json.dumps(rows, indent=2) + "\n")
    (RESULTS / "inner-loop.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
