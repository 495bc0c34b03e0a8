"""`make bench-latency`: how long a record takes to become visible under exactly-once.

Exactly-once output becomes visible when the checkpoint (PyFlink) or commit (Quix) after it
completes: latency is set by that interval, not by how fast a record is processed. This
measures it for `copy-json` and `enrich-50ms`:

- a paced load generator (this process, one idempotent producer) writes the case's records
  at a fixed rate, each carrying the wall-clock time it was produced;
- one observer reads the output with `read_committed` and notes, per record, when it became
  visible: its latency is that minus its produce time;
- each system runs at 50% and 90% of the project's maximum rate for the case (its median in
  `bench/results/compare.json`, the `make bench` that runs just before; or `--max-rate`),
  for checkpoint (and Quix commit) intervals of 1 s, 5 s and 10 s. Quix runs at the same
  input rates, so a peer that cannot keep up shows as falling behind, not as a lower load;
- the system starts and a primer of records shows in the output before the paced load
  begins (start-up is not latency); the first `--warmup` seconds of load are not counted,
  the next `--measure` seconds are, and the load goes on a little longer so the last
  measured records are not the last ever written (a count window must close on them).
  The warm-up is 15 s: a fresh job JVM at 49k records/s leaves a backlog that takes about
  10 s to drain (the p99 of each 5 s of load falls from 2.4-3.5 s to 1.1-1.5 s over the
  first 15 s), and each point starts its system afresh;
- points are run first and not recorded until the broker is warm: until two in a row
  took the broker's CPU within 10% of each other (at least 2, at most 4). A broker just
  started takes two to three times the CPU of a warm one while its JIT compiles, starves
  the job beside it and doubles the p99 or worse; a single unrecorded point is not always
  enough. A broker in use is warm; a benchmark's first point should not measure its JIT.

Results: bench/results/latency.{txt,json,png}, the table copied into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.compare import (
    KEYS,
    PARTITIONS,
    QUIX_WINDOW,
    RESULTS,
    Case,
    CpuMeter,
    _cell,
    broker_and_service,
    copy_to_page,
    launched,
    stop_on_signals,
    system_command,
)
from pipelines.running.processes import descendants
from pipelines_dev.topics import client_conf, create_topics, delete_topics

CASES = [Case("copy-json", "copy-json", 0), Case("enrich-50ms", "enrich", 0, 50)]
LOADS = (0.5, 0.9)
INTERVALS = (1.0, 5.0, 10.0)
SYSTEMS = ("project", "quix")
SLICE_S = 5.0
WARM_POINTS_MAX = 4  # unrecorded points before the first recorded one (at least 2: see below)
WARM_SETTLED = 0.10  # the broker is warm when its CPU in two points in a row differs less
BLOCK = ("<!-- bench:latency -->\n```\n", "```\n<!-- /bench:latency -->")
COMPANIES = [b"acme", b"globex", b"initech", b"umbrella", b"hooli", b"stark", b"wayne", b"tyrell"]
# The bench's ~150-byte record, with the time it was produced (seconds since the epoch).
RECORD = (
    b'{"id": %d, "company": "%s", "amount": %d, "ts": %d, '
    b'"note": "benchmark record padded to a realistic size.....", "sent": %.4f}'
)


@dataclass
class Point:
    case: str
    system: str
    load: float  # of the project's maximum rate for the case
    interval_s: float
    rate: float  # records/s asked of the load generator
    produced_rate: float  # what it managed
    measured: int  # records in the measured span
    seen: int  # of those, visible before the deadline
    p50_s: float | None
    p99_s: float | None
    max_s: float | None
    error: str = ""
    # p99 of each SLICE_S of load in production order, warm-up included: a backlog left by
    # the warm-up drains (falls), a rate the job does not hold climbs to the end
    slices_p99: list[float | None] = field(default_factory=list)
    # CPU over the paced load, in cores: the job (its process tree), the broker, and this
    # process (the load generator and the observer), which share the machine's cores
    cores: dict[str, float] = field(default_factory=dict)


def summary(latencies: list[float], measured: int) -> tuple[float | None, ...]:
    """p50, p99 and max of the visible records' latencies. Records never seen count as
    later than every seen one: a p99 is only given when at least 99% were seen."""
    if not latencies:
        return None, None, None
    ordered = sorted(latencies)

    def at(q: float) -> float | None:
        rank = max(1, -(-measured * q // 100))  # nearest rank among all measured records
        return ordered[int(rank) - 1] if rank <= len(ordered) else None

    return at(50), at(99), ordered[-1] if len(ordered) == measured else None


def broker_settled(broker_cores: list[float], tolerance: float = WARM_SETTLED) -> bool:
    """Whether the broker's CPU in the last two warm-up points (in cores, oldest first)
    agree within `tolerance` of the higher: a JVM still compiling its hot paths spends
    more in each point than the one after."""
    if len(broker_cores) < 2:
        return False
    before, last = broker_cores[-2:]
    return abs(before - last) <= tolerance * max(before, last)


def slices(latency: dict[int, float], first: int, last: int, per_slice: int) -> list[float | None]:
    """The p99 of each run of `per_slice` ids in [first, last), by `summary`'s rule."""
    out = []
    for start in range(first, last, max(1, per_slice)):
        end = min(last, start + max(1, per_slice))
        seen = [latency[i] for i in range(start, end) if i in latency]
        out.append(summary(seen, end - start)[1])
    return out


class PacedProducer(threading.Thread):
    """Writes records at `rate`/s for `total_s` (or until `count` are written): ids from
    `start_id`, keys spread over KEYS, each with the time it was produced."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate: float,
        total_s: float,
        start_id: int,
        count: int | None = None,
    ):
        super().__init__(daemon=True, name=f"paced-{topic}")
        from confluent_kafka import Producer

        self.topic, self.rate, self.total_s, self.start_id = topic, rate, total_s, start_id
        self.count = count
        self.producer = Producer(
            client_conf(bootstrap, **{"enable.idempotence": True, "linger.ms": 5})
        )
        self.sent = 0
        self.elapsed = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.is_set():
            elapsed = time.monotonic() - started
            if elapsed >= self.total_s or self.sent == self.count:
                break
            due = int(self.rate * elapsed) - self.sent
            if self.count is not None:
                due = min(due, self.count - self.sent)
            now = time.time()
            for _ in range(due):
                i = self.start_id + self.sent
                value = RECORD % (i, COMPANIES[i % 8], (i * 37) % 1000, 1_764_000_000_000 + i, now)
                while True:
                    try:
                        self.producer.produce(self.topic, value, key=b"k%d" % (i % KEYS))
                        break
                    except BufferError:  # the local queue is full: let it drain
                        self.producer.poll(0.01)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.elapsed = time.monotonic() - started
        self.producer.flush(60)


class LatencyObserver(threading.Thread):
    """Reads the output with read_committed; per id, the latency of its first sighting."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True, name=f"latency-{topic}")
        from confluent_kafka import Consumer, TopicPartition

        self.latency: dict[int, float] = {}
        self.span = (0, 0)  # ids [first, last) counted as they show: `in_span`
        self.in_span = 0
        self.stop = threading.Event()
        self.consumer = Consumer(
            client_conf(
                bootstrap,
                **{
                    "group.id": f"obs-{topic}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 20,
                },
            )
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

    def run(self) -> None:
        import orjson

        try:
            while not self.stop.is_set():
                messages = self.consumer.consume(num_messages=5000, timeout=0.1)
                now = time.time()
                for message in messages:
                    if message.error() or message.value() is None:
                        continue
                    try:
                        record = orjson.loads(message.value())
                        i, sent = int(record["id"]), float(record["sent"])
                    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                        continue
                    if i not in self.latency:
                        self.latency[i] = now - sent
                        self.in_span += self.span[0] <= i < self.span[1]
        finally:
            self.consumer.close()

    def count(self, first: int, last: int) -> int:
        """How many of ids [first, last) have shown (the span set before they could)."""
        if self.span != (first, last):
            raise ValueError(f"the observer counts ids {self.span}, not {(first, last)}")
        return self.in_span


def wait_for(condition, deadline_s: float, alive) -> bool:
    """True once `condition()` holds; False at the deadline or when `alive()` turns false."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return True
        if not alive():
            return False
        time.sleep(0.2)
    return condition()


def run_point(
    case: Case,
    system: str,
    load: float,
    interval_s: float,
    rate: float,
    bootstrap: str,
    service_url: str,
    warmup_s: float,
    measure_s: float,
    broker_pid: int | None = None,
) -> Point:
    """One system at one rate and interval: started, primed, loaded, measured, stopped."""
    tag = f"latency-{case.name}-{system}-{uuid.uuid4().hex[:6]}"
    source, out = f"{tag}-in", f"{tag}-out"
    topics = {source: PARTITIONS, out: PARTITIONS, f"{tag}-dlq": 1}
    create_topics(bootstrap, topics)
    primer = QUIX_WINDOW * KEYS  # fills one count window per key: Quix enrich emits on it
    tail_s = interval_s + 5  # load after the measured span, so its last records are not last
    first, last = primer + int(rate * warmup_s), primer + int(rate * (warmup_s + measure_s))
    point = Point(case.name, system, load, interval_s, rate, 0.0, last - first, 0, None, None, None)
    observer = LatencyObserver(bootstrap, out)
    observer.span = (0, primer)
    observer.start()
    producer = None
    try:
        with launched(
            system,
            lambda state: system_command(
                system, case, tag, source, bootstrap, service_url, state, interval_s
            ),
            f"latency-{system}.log",
        ) as run:
            try:
                # the primer: the job is up and writing before the paced load starts
                primed = PacedProducer(bootstrap, source, primer * 10, 60, 0, count=primer)
                primed.start()
                primed.join(120)
                alive, proc = run.alive, run.proc
                if not wait_for(lambda: observer.count(0, primer) >= primer, 240, alive):
                    point.error = (
                        "the primer never showed" if alive() else f"exited {proc.returncode}"
                    )
                    return point
                observer.in_span, observer.span = 0, (first, last)  # ids >= primer not yet written
                producer = PacedProducer(
                    bootstrap, source, rate, warmup_s + measure_s + tail_s, primer
                )
                meter = CpuMeter(
                    {
                        "job": descendants(proc.pid),
                        "broker": {broker_pid} if broker_pid else set(),
                        "generator+observer": {os.getpid()},
                    }
                )
                meter.start()
                producer.start()
                producer.join(warmup_s + measure_s + tail_s + 120)
                point.cores = {name: round(c, 2) for name, c in meter.stop().items()}
                point.produced_rate = producer.sent / max(producer.elapsed, 1e-3)
                # everything measured visible, or a deadline well past the interval
                wait_for(
                    lambda: observer.count(first, last) >= last - first, interval_s + 30, alive
                )
                if not alive():
                    point.error = f"exited {proc.returncode}"
            finally:
                if producer is not None:
                    producer.stop.set()
        point.error = point.error or run.stopped
    finally:
        observer.stop.set()
        observer.join(30)
        delete_topics(bootstrap, topics)
    latencies = [observer.latency[i] for i in range(first, last) if i in observer.latency]
    point.seen = len(latencies)
    point.slices_p99 = slices(observer.latency, primer, last, int(rate * SLICE_S))
    point.p50_s, point.p99_s, point.max_s = summary(latencies, point.measured)
    if point.seen < point.measured and not point.error:
        point.error = f"fell behind: {point.seen:,} of {point.measured:,} visible in time"
    return point


def max_rates(path: Path, given: list[str]) -> dict[str, float]:
    """The project's median rate per case: `--max-rate case=N`, else the last make bench."""
    rates: dict[str, float] = {}
    if path.exists():
        for s in json.loads(path.read_text()).get("summaries", []):
            if s["system"] == "project" and s["rates"]:
                rates[s["case"]] = statistics.median(s["rates"])
    for item in given:
        case, _, value = item.partition("=")
        rates[case] = float(value)
    return rates


def table(points: list[Point]) -> str:
    header = (
        f"{'case':12} {'system':8} {'load':>5} {'ckpt s':>6} {'rate/s':>8} {'made/s':>8} "
        f"{'p50 s':>6} {'p99 s':>6} {'max s':>6} {'p99 ok':>6}  notes"
    )
    lines = [header, "-" * len(header)]
    for p in points:
        ok = "-"
        if p.p99_s is not None and p.load <= 0.5:
            ok = "yes" if p.p99_s <= p.interval_s + 1 else "no"
        lines.append(
            f"{p.case:12} {p.system:8} {p.load:5.0%} {p.interval_s:6g} {p.rate:8,.0f} "
            f"{p.produced_rate:8,.0f} {_cell(p.p50_s, '6.2f', 6)} {_cell(p.p99_s, '6.2f', 6)} "
            f"{_cell(p.max_s, '6.2f', 6)} {ok:>6}  {p.error}"
        )
    lines.append("")
    lines.append(
        "p99 ok: at 50% load, p99 <= checkpoint interval + 1 s (the target); `made/s`: "
        "the rate the load generator reached"
    )
    detailed = [p for p in points if p.slices_p99 or p.cores]
    if detailed:
        lines += ["", f"p99 of each {SLICE_S:g} s of load (warm-up first), and CPU in cores:"]
    for p in detailed:
        trend = " ".join(_cell(x, ".2f", 0).strip() for x in p.slices_p99)
        cores = ", ".join(f"{name} {used:.2f}" for name, used in p.cores.items())
        lines.append(
            f"{p.case} {p.system} {p.load:.0%} {p.interval_s:g} s: {trend or '-'}"
            + (f"; {cores}" if cores else "")
        )
    return "\n".join(lines)


def chart(points: list[Point], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no chart (pip install -e '.[bench]')")
        return
    cases = list(dict.fromkeys(p.case for p in points))
    fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4.5), squeeze=False)
    for ax, case in zip(axes[0], cases):
        for system in dict.fromkeys(p.system for p in points):
            for load in LOADS:
                series = sorted(
                    (p for p in points if (p.case, p.system, p.load) == (case, system, load)),
                    key=lambda p: p.interval_s,
                )
                xs = [p.interval_s for p in series if p.p99_s is not None]
                if not xs:
                    continue
                p99 = [p.p99_s for p in series if p.p99_s is not None]
                p50 = [p.p50_s for p in series if p.p99_s is not None]
                line = ax.plot(xs, p99, marker="o", label=f"{system} {load:.0%} p99")[0]
                ax.plot(xs, p50, marker=".", ls=":", color=line.get_color(), label="p50")
        ax.plot(INTERVALS, [i + 1 for i in INTERVALS], "k--", lw=1, label="interval + 1 s")
        ax.set_title(f"{case}: latency under exactly-once")
        ax.set_xlabel("checkpoint / commit interval (s)")
        ax.set_ylabel("produce to visible (read_committed), s")
        ax.set_yscale("log")
        ax.legend(frameon=False, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart: {path}")


def main(argv: list[str] | None = None) -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", help="comma-separated: copy-json, enrich-50ms")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS))
    parser.add_argument("--intervals", default=",".join(f"{x:g}" for x in INTERVALS))
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds of load not counted")
    parser.add_argument("--measure", type=float, default=20.0, help="seconds of load counted")
    parser.add_argument("--max-rate", action="append", default=[], metavar="CASE=RECORDS_S")
    parser.add_argument(
        "--page", action="store_true", help="only copy latency.txt into docs/performance.md"
    )
    args = parser.parse_args(argv)
    if args.page:
        copy_to_page("latency.txt", BLOCK)
        return
    rates = max_rates(RESULTS / "compare.json", args.max_rate)
    selected = [c for c in CASES if not args.cases or c.name in args.cases.split(",")]
    missing = [c.name for c in selected if c.name not in rates]
    if missing:
        sys.exit(
            f"error: no maximum rate for {', '.join(missing)}: run `make bench` first "
            "(bench/results/compare.json) or give --max-rate CASE=RECORDS_S"
        )
    loads = [float(x) for x in args.loads.split(",")]
    intervals = [float(x) for x in args.intervals.split(",")]
    systems = args.systems.split(",")
    points: list[Point] = []
    with broker_and_service() as (broker, service):
        warm = selected[0]
        service.configure(latency_ms=warm.latency_ms, failure_rate=0.0, down=False)
        print(f"warming the broker with {warm.name} on the project (not recorded)", flush=True)
        broker_cores: list[float] = []
        # broker_settled needs two points to compare: at least two run
        while len(broker_cores) < WARM_POINTS_MAX and not broker_settled(broker_cores):
            warmed = run_point(warm, "project", loads[0], intervals[0], rates[warm.name] * loads[0],
                               broker.bootstrap, service.url, args.warmup, 5.0, broker.pid())  # fmt: skip
            broker_cores.append(warmed.cores.get("broker", 0.0))
            print(f"{table([warmed]).splitlines()[2]}  (warm-up, not recorded: broker "
                  f"{broker_cores[-1]:.2f} cores)", flush=True)  # fmt: skip
        for case in selected:
            service.configure(latency_ms=case.latency_ms, failure_rate=0.0, down=False)
            for interval in intervals:
                for load in loads:
                    for system in systems:
                        point = run_point(
                            case,
                            system,
                            load,
                            interval,
                            rates[case.name] * load,
                            broker.bootstrap,
                            service.url,
                            args.warmup,
                            args.measure,
                            broker.pid(),
                        )
                        points.append(point)
                        print(table([point]).splitlines()[2], flush=True)
    text = table(points)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latency.txt").write_text(text + "\n")
    (RESULTS / "latency.json").write_text(
        json.dumps(
            {
                "machine": {"cores": os.cpu_count()},
                "max_rates": rates,
                "warmup_s": args.warmup,
                "measure_s": args.measure,
                "points": [asdict(p) for p in points],
            },
            indent=2,
        )
    )
    chart(points, RESULTS / "latency.png")


if __name__ == "__main__":
    main()
