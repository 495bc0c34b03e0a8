"""`python -m bench.startup`: where a local run's seconds go, launch to first visible record.

Each case's job is launched as `make bench` launches it (same command, a small pre-filled
input) and watched from outside, every 50 ms, for the moments that split its start-up:

- `client`: launch until the job's JVM exists (Python imports, settings, the CLI);
- `submit`: until the CLI says the job was submitted to its mini-cluster (PyFlink's
  gateway, the StreamExecutionEnvironment, building the job, the mini-cluster starting
  inside that JVM and taking the job);
- `deploy`: until the first checkpoint that completed was triggered: tasks deployed, a
  Python stage's interpreter started inside its task (the run triggers a checkpoint
  itself the moment every task runs);
- `checkpoint`: until that checkpoint completed (exactly-once output is visible only
  after one), both moments from the checkpoint's own timestamps in the REST API;
- `visible`: until the first record is visible to a read_committed reader (the
  transactions committed, as the broker's last stable offsets show).

Writes bench/results/startup.txt: each phase's median over `--launches` launches per
case, and the whole.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
import urllib.request
import uuid
from dataclasses import dataclass, field, replace

from bench.compare import (
    PARTITIONS,
    RESULTS,
    Case,
    Observer,
    broker_and_service,
    cases,
    fill_input,
    launched,
    stop_on_signals,
    system_command,
)
from pipelines.running.processes import descendants, program_name
from pipelines_dev.topics import create_topics, delete_topics

PHASES = ("client", "submit", "deploy", "checkpoint", "visible")
SUBMITTED = re.compile(r"submitted to the local mini-cluster as (\w+) \(REST/UI at (\S+)\)")
TICK_S = 0.05


@dataclass
class Timeline:
    """When each moment came, in seconds from launch (None: not seen before the deadline)."""

    at: dict[str, float] = field(default_factory=dict)

    def phases(self) -> dict[str, float]:
        """Each phase's length: from the moment before it (launch for the first)."""
        lengths, previous = {}, 0.0
        for name in PHASES:
            if name not in self.at:
                break
            lengths[name] = self.at[name] - previous
            previous = self.at[name]
        return lengths


def _get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


def first_checkpoint(rest: str, job_id: str) -> tuple[float, float] | None:
    """(triggered, completed) of the job's first completed checkpoint, epoch seconds."""
    stats = _get(f"{rest}/jobs/{job_id}/checkpoints") or {}
    done = [c for c in stats.get("history") or [] if c.get("status") == "COMPLETED"]
    if not done:
        return None
    first = min(done, key=lambda c: c["trigger_timestamp"])
    return first["trigger_timestamp"] / 1000, first["latest_ack_timestamp"] / 1000


def watch(case: Case, bootstrap: str, service_url: str, source: str, deadline_s: float) -> Timeline:
    """One launch of the project's job over `case`, its moments noted from outside."""
    tag = f"startup-{case.name}-{uuid.uuid4().hex[:6]}"
    topics = {f"{tag}-out": PARTITIONS, f"{tag}-dlq": 1}
    create_topics(bootstrap, topics)
    observer = Observer(bootstrap, f"{tag}-out", 1, reading=False)
    timeline = Timeline()
    rest = job_id = None
    try:
        started, wall = time.monotonic(), time.time()
        observer.start()
        with launched(
            "project",
            lambda state: system_command(
                "project", case, tag, source, bootstrap, service_url, state
            ),
            f"startup-{case.name}.log",
        ) as run:
            while time.monotonic() - started < deadline_s and run.alive():
                now = time.monotonic() - started
                at = timeline.at
                if "client" not in at and any(
                    program_name(p) == "java" for p in descendants(run.proc.pid)
                ):
                    at["client"] = now
                if "submit" not in at and (found := SUBMITTED.search(run.log_path.read_text())):
                    at["submit"], job_id, rest = now, found[1], found[2]
                if rest and job_id and "checkpoint" not in at:
                    if found_checkpoint := first_checkpoint(rest, job_id):
                        at["deploy"], at["checkpoint"] = (t - wall for t in found_checkpoint)
                if observer.times and "checkpoint" in at:
                    at["visible"] = observer.times[0] - started
                    break
                time.sleep(TICK_S)
    finally:
        observer.stop.set()
        observer.join(10)
        delete_topics(bootstrap, list(topics))
    return timeline


def table(timelines: dict[str, list[Timeline]]) -> str:
    header = f"{'case':13} {'launches':>8} " + " ".join(f"{p:>10}" for p in PHASES)
    header += f" {'launch to visible':>18}"
    lines = [header, "-" * len(header)]
    for name, runs in timelines.items():
        cells = []
        for phase in PHASES:
            values = [t.phases()[phase] for t in runs if phase in t.phases()]
            cells.append(f"{statistics.median(values):9.2f}s" if values else f"{'-':>10}")
        totals = [t.at["visible"] for t in runs if "visible" in t.at]
        total = f"{statistics.median(totals):17.2f}s" if totals else f"{'-':>18}"
        lines.append(f"{name:13} {len(runs):8} " + " ".join(cells) + f" {total}")
    lines.append("")
    lines.append("medians of each phase; a phase starts where the one before it ended")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="copy-bytes,copy-json,enrich-50ms")
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args(argv)
    known = {c.name: c for c in cases(quick=False)}
    selected = [replace(known[n], records=args.records) for n in args.cases.split(",")]
    timelines: dict[str, list[Timeline]] = {}
    with broker_and_service() as (broker, service):
        for case in selected:
            service.configure(latency_ms=case.latency_ms, failure_rate=0.0, down=False)
            source = fill_input(case, broker.bootstrap)
            try:
                for _ in range(args.launches):
                    timeline = watch(case, broker.bootstrap, service.url, source, 120.0)
                    timelines.setdefault(case.name, []).append(timeline)
                    print(case.name, {k: round(v, 2) for k, v in timeline.at.items()}, flush=True)
            finally:
                delete_topics(broker.bootstrap, [source])
    text = table(timelines)
    print(text)
    (RESULTS / "startup.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
