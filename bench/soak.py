"""`make bench-soak`: the enrich job held at half its maximum rate for ten minutes, to show
that nothing grows while it runs: memory, checkpoint duration, checkpointed state, backlog.

A leak in a streaming job does not show in a benchmark that lasts a minute: a Python worker
that keeps every lookup's future, a JVM heap that creeps, state that is never cleared,
checkpoints that take a little longer each time. So this runs the job as `make bench` does
(its defaults, one slot, its configured 5 s checkpoints, the 50 ms demo service) under a
paced load at 50% of `make bench`'s median rate for enrich-50ms, and every few seconds
samples:

- the resident memory of the job's whole process tree (the mini-cluster JVM, the CLI and
  its Python worker);
- every completed checkpoint's end-to-end duration and checkpointed size, from the job's
  REST API;
- the backlog: records produced but not yet visible to a `read_committed` reader.

Growth is the median of the last minute over the median of the first minute after warm-up
(`--warmup`, default 120 s: the JVM's heap and the worker's buffers fill first). The target
is under 5% for memory and checkpoint duration. The reader also checks that every record
produced was delivered exactly once.

Results: bench/results/soak.{txt,json,png}, the table copied into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.compare import (
    PARTITIONS,
    RESULTS,
    Case,
    Launched,
    broker_and_service,
    copy_to_page,
    launched,
    stop_on_signals,
    system_command,
    tree_rss_mb,
)
from bench.latency import PacedProducer, max_rates, wait_for
from pipelines_dev.topics import client_conf, create_topics, delete_topics

CASE = Case("enrich-50ms", "enrich", 0, 50)
INTERVAL_S = 5.0  # conf/base/enrich.yaml's checkpoint.interval
TARGET_GROWTH = 0.05
BLOCK = ("<!-- bench:soak -->\n```\n", "```\n<!-- /bench:soak -->")
SUBMITTED = re.compile(r"as ([0-9a-f]{32}) \(REST/UI at (http://[0-9.:]+)\)")


@dataclass
class Sample:
    at_s: float  # since the paced load began
    rss_mb: float
    produced: int
    visible: int


@dataclass
class Checkpoint:
    id: int
    at_s: float  # when it completed, since the paced load began
    duration_ms: int
    size_bytes: int


@dataclass
class Soak:
    rate: float
    duration_s: float
    warmup_s: float
    samples: list[Sample] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    produced: int = 0
    distinct: int = 0
    duplicates: int = 0
    error: str = ""


class CountingObserver(threading.Thread):
    """Reads the output with read_committed and counts each id once, in a bitmap: ten
    minutes of ids do not fit a set in the benchmark's own memory budget."""

    def __init__(self, bootstrap: str, topic: str, capacity: int):
        super().__init__(daemon=True, name=f"soak-{topic}")
        from confluent_kafka import Consumer, TopicPartition

        self.seen = bytearray(capacity // 8 + 1)
        self.distinct = 0
        self.duplicates = 0
        self.stop = threading.Event()
        self.consumer = Consumer(
            client_conf(
                bootstrap,
                **{
                    "group.id": f"obs-{topic}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                },
            )
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

    def note(self, i: int) -> None:
        byte, bit = divmod(i, 8)
        if byte >= len(self.seen):
            self.seen.extend(bytearray(byte - len(self.seen) + 1))
        if self.seen[byte] >> bit & 1:
            self.duplicates += 1
        else:
            self.seen[byte] |= 1 << bit
            self.distinct += 1

    def run(self) -> None:
        import orjson

        try:
            while not self.stop.is_set():
                for message in self.consumer.consume(num_messages=5000, timeout=0.2):
                    if message.error() or message.value() is None:
                        continue
                    try:
                        self.note(int(orjson.loads(message.value())["id"]))
                    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                        continue
        finally:
            self.consumer.close()


def completed_checkpoints(history: list[dict], started_ms: float, known: set[int]) -> list:
    """The completed checkpoints in a REST history not seen before (the history holds only
    the last few, so it is read often); `at_s` relative to `started_ms` (epoch ms)."""
    found = []
    for entry in history:
        if entry.get("status") != "COMPLETED" or entry.get("id") in known:
            continue
        known.add(entry["id"])
        found.append(
            Checkpoint(
                entry["id"],
                (entry.get("latest_ack_timestamp", 0) - started_ms) / 1000,
                int(entry.get("end_to_end_duration", 0)),
                int(entry.get("checkpointed_size", entry.get("state_size", 0))),
            )
        )
    return sorted(found, key=lambda c: c.id)


def windows(points: list[tuple[float, float]], warmup_s: float, end_s: float, span_s=60.0):
    """The values of the first `span_s` after warm-up, and of the last `span_s`."""
    first = [v for t, v in points if warmup_s <= t < warmup_s + span_s]
    last = [v for t, v in points if end_s - span_s <= t <= end_s]
    return first, last


def growth(points: list[tuple[float, float]], warmup_s: float, end_s: float, span_s=60.0):
    """Median of the values in the last `span_s` over the median in the first `span_s`
    after warm-up, minus one; None when either window is empty."""
    first, last = windows(points, warmup_s, end_s, span_s)
    if not first or not last or statistics.median(first) == 0:
        return None
    return statistics.median(last) / statistics.median(first) - 1


def measures(soak: Soak) -> list[tuple[str, list[tuple[float, float]], str, bool]]:
    """(name, (time, value) series, unit, judged) of each quantity the soak follows; the
    target (growth under TARGET_GROWTH) is judged for memory and checkpoint duration."""
    return [
        ("RSS of the job's processes", [(s.at_s, s.rss_mb) for s in soak.samples], "MB", True),
        (
            "checkpoint duration",
            [(c.at_s, c.duration_ms) for c in soak.checkpoints],
            "ms",
            True,
        ),
        (
            "checkpointed size",
            [(c.at_s, c.size_bytes) for c in soak.checkpoints],
            "bytes",
            False,
        ),
        (
            "backlog (produced, not visible)",
            [(s.at_s, s.produced - s.visible) for s in soak.samples],
            "records",
            False,
        ),
    ]


def table(soak: Soak) -> str:
    end = soak.duration_s
    header = f"{'quantity':34} {'first min':>10} {'last min':>10} {'growth':>7} {'target':>7}"
    lines = [
        f"enrich-50ms, defaults, one slot, {INTERVAL_S:g} s checkpoints, paced at "
        f"{soak.rate:,.0f} records/s for {soak.duration_s:.0f} s "
        f"({soak.warmup_s:.0f} s warm-up); medians of the first and the last minute after it",
        "",
        header,
        "-" * len(header),
    ]
    for name, points, unit, judged in measures(soak):
        first, last = windows(points, soak.warmup_s, end)
        change = growth(points, soak.warmup_s, end)
        verdict = "-"
        if judged and change is not None:
            verdict = "met" if change < TARGET_GROWTH else "not met"
        lines.append(
            f"{name:34} "
            f"{_median_cell(first, unit):>10} {_median_cell(last, unit):>10} "
            f"{'-' if change is None else f'{change:+.1%}':>7} {verdict:>7}"
        )
    lines.append("")
    delivered = (
        f"delivered: {soak.distinct:,} of {soak.produced:,} records produced, "
        f"{soak.duplicates:,} duplicates (read_committed)"
    )
    lines.append(delivered)
    lines.append(f"checkpoints completed: {len(soak.checkpoints)}")
    if soak.error:
        lines.append(f"error: {soak.error}")
    return "\n".join(lines)


def _median_cell(values: list[float], unit: str) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):,.0f} {unit if unit in ('MB', 'ms') else ''}".strip()


def chart(soak: Soak, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart (pip install -e '.[bench]')")
        return
    series = measures(soak)
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.2 * len(series)), sharex=True)
    for ax, (name, points, unit, _) in zip(axes, series):
        ax.plot([t for t, _ in points], [v for _, v in points], lw=1)
        ax.axvspan(0, soak.warmup_s, color="grey", alpha=0.15, lw=0)
        ax.set_ylabel(unit)
        ax.set_title(name, fontsize=9, loc="left")
        ax.set_ylim(0, max((v for _, v in points), default=1) * 1.15 or 1)
    axes[0].text(soak.warmup_s / 2, 0, "warm-up", ha="center", va="bottom", fontsize=7)
    axes[-1].set_xlabel("seconds of paced load")
    fig.suptitle(
        f"enrich-50ms held at {soak.rate:,.0f} records/s (50% of its maximum), "
        f"{INTERVAL_S:g} s checkpoints",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart: {path}")


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def _load(
    soak: Soak,
    run: Launched,
    observer: CountingObserver,
    bootstrap: str,
    source: str,
    every_s: float,
    producers: list[PacedProducer],
) -> None:
    """Prime the job, then hold the paced load for the soak's duration, sampling memory
    and the checkpoint history every `every_s`. The producer it starts goes into
    `producers` at once, for the caller to stop on every path."""
    alive, proc = run.alive, run.proc
    primer = 1_000
    PacedProducer(bootstrap, source, primer * 10, 60, 0, count=primer).run()
    if not wait_for(lambda: observer.distinct >= primer, 240, alive):
        soak.error = "the primer never showed" if alive() else "the job exited"
        return
    found = SUBMITTED.search(run.log_path.read_text())
    if found is None:
        soak.error = f"no REST address in {run.log_path}"
        return
    checkpoints_url = f"{found.group(2)}/jobs/{found.group(1)}/checkpoints"
    producer = PacedProducer(bootstrap, source, soak.rate, soak.duration_s, primer)
    producers.append(producer)
    started, started_ms = time.monotonic(), time.time() * 1000
    producer.start()
    known: set[int] = set()
    while producer.is_alive() and alive():
        rss = tree_rss_mb(proc.pid)
        at = time.monotonic() - started
        soak.samples.append(Sample(at, rss, producer.sent, observer.distinct - primer))
        try:
            history = _get(checkpoints_url).get("history") or []
            soak.checkpoints += completed_checkpoints(history, started_ms, known)
        except OSError:
            pass  # a slow answer: the next read catches up (the history holds 10)
        producer.join(every_s)
    if not alive():
        soak.error = f"the job exited with {proc.returncode} (see {run.log_path})"
    soak.produced = producer.sent + primer
    # every record visible, or an interval and a generous margin after the load
    wait_for(lambda: observer.distinct >= soak.produced, INTERVAL_S + 60, alive)


def run(rate: float, duration_s: float, warmup_s: float, every_s: float) -> Soak:
    soak = Soak(rate, duration_s, warmup_s)
    with broker_and_service(CASE.latency_ms) as (broker, service):
        bootstrap = broker.bootstrap
        tag = f"soak-{uuid.uuid4().hex[:6]}"
        source, out = f"{tag}-in", f"{tag}-out"
        topics = {source: PARTITIONS, out: PARTITIONS, f"{tag}-dlq": 1}
        create_topics(bootstrap, topics)
        observer = CountingObserver(bootstrap, out, int(rate * (duration_s + 60)))
        observer.start()
        producers: list[PacedProducer] = []
        try:
            with launched(
                "project",
                lambda state: system_command(
                    "project", CASE, tag, source, bootstrap, service.url, state, INTERVAL_S
                ),
                "soak-project.log",
            ) as run:
                try:
                    _load(soak, run, observer, bootstrap, source, every_s, producers)
                finally:
                    for producer in producers:
                        producer.stop.set()
            soak.error = soak.error or run.stopped
        finally:
            observer.stop.set()
            observer.join(30)
            soak.distinct, soak.duplicates = observer.distinct, observer.duplicates
            delete_topics(bootstrap, topics)
    return soak


def main(argv: list[str] | None = None) -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    parser.add_argument("--warmup", type=float, default=120.0, help="seconds not judged")
    parser.add_argument("--load", type=float, default=0.5, help="of make bench's median rate")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--max-rate", action="append", default=[], metavar="CASE=RECORDS_S")
    parser.add_argument(
        "--page", action="store_true", help="only copy soak.txt into docs/performance.md"
    )
    args = parser.parse_args(argv)
    if args.page:
        copy_to_page("soak.txt", BLOCK)
        return
    if args.duration < args.warmup + 120:
        sys.exit("error: --duration must leave at least 120 s after --warmup (two minutes)")
    rates = max_rates(RESULTS / "compare.json", args.max_rate)
    if CASE.name not in rates:
        sys.exit(
            f"error: no maximum rate for {CASE.name}: run `make bench` first "
            "(bench/results/compare.json) or give --max-rate enrich-50ms=RECORDS_S"
        )
    soak = run(rates[CASE.name] * args.load, args.duration, args.warmup, args.every)
    text = table(soak)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "soak.txt").write_text(text + "\n")
    (RESULTS / "soak.json").write_text(
        json.dumps({"machine": {"cores": os.cpu_count()}, **asdict(soak)}, indent=2)
    )
    chart(soak, RESULTS / "soak.png")
    if soak.error:
        sys.exit(f"error: {soak.error}")


if __name__ == "__main__":
    main()
