"""`make bench-operators`: the enrichment operators side by side, in one run, on this machine.

For each lookup latency, capacity and slot count it runs the enrich job over a pre-filled
topic four ways: (a) `sync`, a blocking lookup per record (the reports' way); (b) `async`,
PyFlink's AsyncDataStream per record as documented, with a timeout; both built by
bench/enrich_per_record.py, not part of pipelines; (c) `batched`, the project's batched
operator, one GET per record; (d) the same with coalesced lookups. All of them call the
project's local enrichment service over HTTP and write through the exactly-once sink.

Rates come from the output topic, created with broker timestamps (LogAppendTime): the
records written after the first burst over the time from its end to the last, so job
start-up is not counted; ratios to (b) from the same run cancel most of the machine's noise. Results: a
table on stdout, bench/results/enrichment.json and .png.
"""

from __future__ import annotations

import argparse
import bisect
import json
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, fields

from bench.compare import broker_and_service
from pipelines.host.paths import PROJECT_ROOT
from pipelines_dev.demo import demo_values
from pipelines_dev.enrichment_service import Service
from pipelines_dev.topics import (
    committed_offsets,
    create_topics,
    delete_topics,
    produce,
    read_messages,
)

RESULTS = PROJECT_ROOT / "bench" / "results"
PLAIN_MAP_RATE_NOTE = "plain Python map rate, measured in the same run"


@dataclass
class Result:
    operator: str
    latency_ms: int
    capacity: int
    slots: int
    records: int
    rate: float
    slowest_checkpoint_ms: int
    checkpoints: int
    offset_moves: int
    ratio_to_async: float | None = None
    limit: float | None = None
    ratio_to_limit: float | None = None


PER_RECORD_JOB = [sys.executable, "-m", "bench.enrich_per_record", "--conf-dir", "bench/conf"]
ENRICH_JOB = [sys.executable, "-m", "pipelines.cli", "run", "enrich"]
BATCHED = ["--set", "enrichment.operator=batched"]
VARIANTS = {  # label -> the command that starts its job (run_case adds the run's settings)
    "sync": [*PER_RECORD_JOB, "--set", "per_record.operator=sync"],
    "async": [*PER_RECORD_JOB, "--set", "per_record.operator=async"],
    "batched": [*ENRICH_JOB, *BATCHED, "--set", "enrichment.coalesce=false"],
    "batched+coalesce": [*ENRICH_JOB, *BATCHED, "--set", "enrichment.coalesce=true"],
}


# Records written this soon after the first are its burst: the output of the first bundle
# (a Python worker answers a bundle at once), not a sign of when the work began.
FIRST_BURST_MS = 20


def written_rate(stamps: list[int]) -> float:
    """Records per second from the broker timestamps (ms, sorted) of a run's output: those
    written after the first burst, over the time from its end to the last. Counting from
    the first record instead credits the first bundle's records to no time at all (a
    blocking 50 ms lookup, at most 20 records/s, measured 47/s that way)."""
    if not stamps:
        return 0.0
    burst = bisect.bisect_right(stamps, stamps[0] + FIRST_BURST_MS)
    if burst == len(stamps):  # all of it in one burst: no span to measure
        return 0.0
    return (len(stamps) - burst) / (max(stamps[-1] - stamps[burst - 1], 1) / 1000)


def run_case(
    bootstrap: str,
    service: Service,
    label: str,
    latency_ms: int,
    capacity: int,
    slots: int,
    records: int,
) -> Result:
    tag = f"bench-{label.replace('+', '-')}-{uuid.uuid4().hex[:6]}"
    topics = {f"{tag}-in": max(slots, 2), f"{tag}-dlq": 1}
    create_topics(bootstrap, topics)
    # The output topic's records are stamped by the broker when written: the run's timing.
    stamped = {"message.timestamp.type": "LogAppendTime"}
    create_topics(bootstrap, {f"{tag}-out": max(slots, 2)}, config=stamped)
    produce(bootstrap, f"{tag}-in", demo_values(records))
    service.configure(latency_ms=latency_ms, failure_rate=0.0, down=False)
    # The per-record operators hold records, not batches, in flight: a Python bundle (which
    # a checkpoint waits for) of as many as they keep in flight, as the project sizes its
    # bundles in batches. The blocking map keeps one: its records then come out one by
    # one, not all at once when a bundle of slow lookups ends.
    bundle = {"sync": 1, "async": capacity}.get(label)
    per_record = ["--set", f"python.bundle_size={bundle}"] if bundle else []
    cmd = [
        *VARIANTS[label],
        *per_record,
        "--skip-preflight",
        "--set",
        f"kafka.bootstrap_servers={bootstrap}",
        "--set",
        f"source.topics=[{tag}-in]",
        "--set",
        f"source.group_id={tag}",
        "--set",
        f"sink.topic={tag}-out",
        "--set",
        f"sink.dead_letter_topic={tag}-dlq",
        "--set",
        f"sink.transactional_id_prefix={tag}",
        "--set",
        f"demo_service.url={service.url}",
        "--set",
        f"enrichment.capacity={capacity}",
        "--set",
        f"enrichment.timeout={max(2000, latency_ms * 4)}ms",
        "--set",
        f"job.parallelism={slots}",
        "--set",
        "source.bounded=true",
        "--set",
        "checkpoint.interval=2s",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=PROJECT_ROOT
    )
    moves, last = 0, None
    while proc.poll() is None:
        try:
            total = sum(max(o, 0) for o in committed_offsets(bootstrap, tag, f"{tag}-in").values())
        except Exception:  # noqa: BLE001 - the group may not exist yet
            total = None
        if total is not None and total != last:
            moves += last is not None
            last = total
        time.sleep(0.5)
    output = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{label} run failed:\n{output[-2000:]}")
    out = read_messages(bootstrap, f"{tag}-out")
    if len(out) != records:
        raise RuntimeError(f"{label}: {len(out)} of {records} records came out")
    rate = written_rate(sorted(m.timestamp()[1] for m in out))
    slowest, checkpoints = 0, 0
    for line in output.splitlines():
        if "slowest" in line:
            slowest = int(line.split("slowest ")[1].split(" ms")[0])
            checkpoints = int(line.split("checkpoints ")[1].split(" completed")[0])
    delete_topics(bootstrap, [*topics, f"{tag}-out"])
    return Result(
        label,
        latency_ms,
        capacity,
        slots,
        records,
        rate,
        slowest,
        checkpoints,
        moves,
    )


def plain_map_rate(bootstrap: str, records: int) -> float:
    """Records/s of the Python parse stage with no lookup (the validating passthrough job),
    same machine, same run."""
    tag = f"bench-map-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {f"{tag}-in": 2, f"{tag}-out": 2, f"{tag}-dlq": 1})
    produce(bootstrap, f"{tag}-in", demo_values(records))
    started = time.monotonic()
    cmd = [
        sys.executable,
        "-m",
        "pipelines.cli",
        "run",
        "passthrough",
        "--skip-preflight",
        "--set",
        f"kafka.bootstrap_servers={bootstrap}",
        "--set",
        f"source.topics=[{tag}-in]",
        "--set",
        f"source.group_id={tag}",
        "--set",
        f"sink.topic={tag}-out",
        "--set",
        f"sink.transactional_id_prefix={tag}",
        "--set",
        "source.bounded=true",
        "--set",
        "parse.validate_records=true",
        "--set",
        f"sink.dead_letter_topic={tag}-dlq",
    ]
    # Start-up is measured with an empty run and subtracted.
    subprocess.run(cmd, check=True, capture_output=True, cwd=PROJECT_ROOT)
    full = time.monotonic() - started
    empty_tag = f"{tag}-empty"
    create_topics(bootstrap, {f"{empty_tag}-in": 2, f"{empty_tag}-out": 2, f"{empty_tag}-dlq": 1})
    started = time.monotonic()
    empty = [c.replace(tag, empty_tag) for c in cmd]
    subprocess.run(empty, check=True, capture_output=True, cwd=PROJECT_ROOT)
    startup = time.monotonic() - started
    delete_topics(
        bootstrap, [f"{t}-{end}" for t in (tag, empty_tag) for end in ("in", "out", "dlq")]
    )
    return records / max(full - startup, 0.1)


CASES_FULL = [  # (latency ms, capacity, slots)
    (5, 1000, 1),
    (50, 100, 1),
    (50, 1000, 1),
    (50, 1000, 2),
    (500, 1000, 1),
]
CASES_QUICK = [(50, 1000, 1)]


def records_for(label: str, latency_ms: int, capacity: int, slots: int) -> int:
    """Enough records for several seconds of steady work at each variant's expected rate."""
    if label == "sync":
        return max(20, int(8 * 1000 / latency_ms) * slots)
    if label == "async":
        return 6000 if latency_ms < 500 else 4000
    if label == "batched":
        return 20000 if latency_ms < 500 else 8000
    return 40000 if latency_ms < 500 else 16000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="one case: 50 ms, capacity 1000, 1 slot"
    )
    parser.add_argument(
        "--chart-only",
        action="store_true",
        help="redraw the chart from bench/results/enrichment.json",
    )
    args = parser.parse_args(argv)
    if args.chart_only:
        saved = json.loads((RESULTS / "enrichment.json").read_text())
        known = {f.name for f in fields(Result)}
        _chart([Result(**{k: v for k, v in r.items() if k in known}) for r in saved["results"]])
        return
    results: list[Result] = []
    with broker_and_service() as (broker, service):
        map_rate = plain_map_rate(broker.bootstrap, 100_000 if not args.quick else 30_000)
        print(f"plain Python map (passthrough job): {map_rate:,.0f} records/s")
        for latency, capacity, slots in CASES_QUICK if args.quick else CASES_FULL:
            row = {}
            for operator in VARIANTS:
                n = records_for(operator, latency, capacity, slots)
                result = run_case(broker.bootstrap, service, operator, latency, capacity, slots, n)
                result.limit = min(capacity * slots * 1000 / latency, map_rate)
                result.ratio_to_limit = result.rate / result.limit
                row[operator] = result
                print(
                    f"  {operator:16} {latency:>4} ms cap {capacity:>5} slots {slots}: "
                    f"{result.rate:,.0f}/s",
                    flush=True,
                )
            for result in row.values():
                result.ratio_to_async = result.rate / row["async"].rate
                results.append(result)
    write_results(results, map_rate)


def write_results(results: list[Result], map_rate: float) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    header = (
        f"{'operator':16} {'lat ms':>6} {'cap':>5} {'slots':>5} {'records/s':>10} "
        f"{'x async':>8} {'x limit':>8} {'ckpt max ms':>11} "
        f"{'offset moves':>12}"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r.operator:16} {r.latency_ms:>6} {r.capacity:>5} {r.slots:>5} "
            f"{r.rate:>10,.0f} {r.ratio_to_async:>8.2f} {r.ratio_to_limit:>8.3f} "
            f"{r.slowest_checkpoint_ms:>11} "
            f"{r.offset_moves:>12}"
        )
    table = "\n".join(lines)
    print(table)
    print(f"limit = min(capacity x slots / latency, {PLAIN_MAP_RATE_NOTE}: {map_rate:,.0f}/s)")
    (RESULTS / "enrichment.txt").write_text(table + "\n")
    (RESULTS / "enrichment.json").write_text(
        json.dumps(
            {
                "plain_map_rate": map_rate,
                "results": [asdict(r) for r in results],
                "machine": {"cores": __import__("os").cpu_count()},
            },
            indent=2,
        )
    )
    _chart(results)


def _chart(results: list[Result]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart (pip install -e '.[bench]')")
        return
    cases = sorted({(r.latency_ms, r.capacity, r.slots) for r in results})
    labels = [
        f"{lat} ms\ncap {cap}\n{slots} slot{'s' if slots > 1 else ''}" for lat, cap, slots in cases
    ]
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(cases)), 4.5))
    width = 0.2
    for i, operator in enumerate(VARIANTS):
        rates = [
            next(
                r.rate
                for r in results
                if (r.latency_ms, r.capacity, r.slots) == c and r.operator == operator
            )
            for c in cases
        ]
        ax.bar(
            [x + (i - 1.5) * width for x in range(len(cases))],
            rates,
            width,
            label={
                "sync": "(a) sync map",
                "async": "(b) AsyncDataStream, per record",
                "batched": "(c) project operator, batched",
                "batched+coalesce": "(c) batched + coalesced lookups",
            }[operator],
        )
    ax.set_yscale("log")
    ax.set_ylabel("records/s (log)")
    ax.set_xticks(range(len(cases)), labels)
    ax.set_title("Enrichment throughput, same run, 2-core machine")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, frameon=False)
    fig.tight_layout()
    fig.savefig(RESULTS / "enrichment.png", dpi=120)
    print(f"chart: {RESULTS / 'enrichment.png'}")


if __name__ == "__main__":
    main()
