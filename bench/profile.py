"""`make profile`: where one case's time goes, measured while the project's job runs it.

The job runs the case exactly as `make bench` runs it (same input, service, observer and
settings). Once `--at` of the output is visible (a fifth by default; later in a long input
for a JVM whose JIT has finished compiling), for `--window` seconds:

- the CPU time of every process taking part (pipelines.running.processes): the CLI
  (which hosts the Python worker in a local run: Flink's loopback mode), the job's JVM,
  the broker and the enrichment service, as cores and as microseconds per record at the
  rate the observer saw in the same window. Their sum against the machine's cores says
  whether the job is short of CPU or waits;
- a py-spy flame graph of the Python worker (in thread mode: of the JVM, whose embedded
  interpreter runs the stage) counting only samples that hold the GIL (`--gil`): time
  spent waiting (for lookups, for the JVM) does not fill the picture, and the GIL share
  says how busy the one core Python can use was.

Writes bench/results/profile-<case>[-<label>].{txt,svg}. A measurement, not a test: the
numbers are this machine's, and the README quotes them with the run they came from.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from bench.compare import (
    LOGS,
    RESULTS,
    CpuMeter,
    Observer,
    broker_and_service,
    cases,
    deadline_s,
    fill_input,
    measure,
    stop_on_signals,
    use_tuning,
)
from bench.jvm_profile import Recording, ThreadCpu, summary
from bench.jvm_profile import report as jvm_report
from pipelines.running import registry
from pipelines.running.processes import ProcessGroups, descendants, program_name
from pipelines.settings import ExecutionMode, load_settings
from pipelines_dev.topics import delete_topics

TITLE = re.compile(r"<title>(.+?) \(([\d,]+) samples?, [\d.]+%\)</title>")


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        sys.exit("error: py-spy is not installed: run `make venv` (the bench extra has it)")
    return found


def hottest_frames(svg: Path, count: int = 25) -> tuple[int, list[tuple[int, str]]]:
    """(all samples, the frames with the most samples below them) from py-spy's SVG: each
    frame's title carries its inclusive count; a frame seen on several stacks is summed."""
    frames: Counter[str] = Counter()
    total = 0
    for name, samples in TITLE.findall(svg.read_text(errors="replace")):
        n = int(samples.replace(",", ""))
        if name == "all":
            total = n
        else:
            frames[html.unescape(name)] += n
    return total, [(n, name) for name, n in frames.most_common(count)]


class Sampler:
    """Runs beside `measure`: waits for `at` of the output, then samples one window."""

    def __init__(
        self,
        case,
        window_s: float,
        svg: Path,
        others: dict[str, int | None],
        in_the_jvm: bool = False,
        jfr: Path | None = None,
        at: float = 0.2,
    ):
        self.case, self.window_s, self.svg, self.others = case, window_s, svg, others
        self.jfr = jfr  # where the JVM's flight recording of the window goes
        self.at = at  # the share of the output visible when the window starts
        # Thread mode: the stage's Python runs inside the JVM (pemja), and py-spy reads the
        # interpreter there; the CLI's own Python then only watches the job.
        self.in_the_jvm = in_the_jvm
        self.result: dict | None = None

    def __call__(self, proc: subprocess.Popen, observer: Observer) -> None:
        while len(observer.times) < self.case.records * self.at:
            if observer.done.is_set() or observer.stop.is_set() or proc.poll() is not None:
                return
            time.sleep(0.2)
        cli = "the CLI (watching)" if self.in_the_jvm else "Python worker (the CLI, loopback)"
        labels = {proc.pid: cli}
        spied = proc.pid
        jvm = None
        for pid in descendants(proc.pid) - {proc.pid}:
            if program_name(pid) == "java":
                jvm = pid
                labels[pid] = "Flink JVM (mini-cluster)"
                if self.in_the_jvm:
                    labels[pid] = "Flink JVM with the Python stage"
                    spied = pid
        labels.update({pid: name for name, pid in self.others.items() if pid})
        groups: dict[str, set[int]] = {}
        for pid, label in labels.items():  # two processes of one kind add up, not overwrite
            groups.setdefault(label, set()).add(pid)
        meter = CpuMeter(groups)
        threads = ThreadCpu(jvm) if jvm else None
        recording = Recording(jvm, self.jfr) if jvm and self.jfr else None
        if recording:
            recording.start()
        if threads:
            threads.start()
        meter.start()
        seen_before, started = len(observer.times), time.monotonic()
        if self.case.kind != "copy-bytes":  # the JVM-only copy runs no Python
            self.spy(spied)
        # The window lasts its length whether or not py-spy ran for all of it.
        while time.monotonic() - started < self.window_s and proc.poll() is None:
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        cores = meter.stop()
        by_thread = threads.stop() if threads else {}
        if recording and proc.poll() is None:
            recording.dump()
        rate = (len(observer.times) - seen_before) / elapsed
        self.result = {"window_s": elapsed, "rate": rate, "cores": cores, "spied": labels[spied]}
        self.result["at"] = self.at
        self.result["jvm_threads"] = by_thread

    def spy(self, pid: int) -> None:
        """py-spy's flame graph of `pid`'s Python over the window."""
        owner = ProcessGroups()
        spy = owner.popen(
            [py_spy(), "record", "--gil", "--nonblocking", "--rate", "100"]
            + ["--duration", str(int(self.window_s)), "--pid", str(pid)]
            + ["--output", str(self.svg), "--format", "flamegraph"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            spy.wait(self.window_s + 60)
        finally:
            owner.end()


def in_the_jvm(case, sets: list[str]) -> bool:
    """Whether the job's Python stage runs in thread mode with these settings, as the
    settings decide it (the default follows the enrichment operator)."""
    job = "enrich" if case.kind == "enrich" else "passthrough"
    overrides = ["sink.dead_letter_topic=profile-dlq", *sets]
    loaded = load_settings(
        job, overrides=overrides, environ={}, local=False, sections=registry.load(job).sections
    )
    return loaded.settings.python.execution_mode is ExecutionMode.THREAD


def report(case_name: str, label: str, result: dict, svg: Path, jfr: Path | None = None) -> str:
    rate, window = result["rate"], result["window_s"]
    lines = [
        f"profile of {case_name} ({label}): {window:.0f} s window at {rate:,.0f} records/s "
        f"visible (read_committed), from {result.get('at', 0.2):.0%} of the output",
        "",
        f"{'process':36} {'cores':>6} {'us CPU/record':>14}",
        "-" * 58,
    ]
    for name, cores in sorted(result["cores"].items(), key=lambda kv: -kv[1]):
        per = f"{cores / rate * 1e6:14.1f}" if rate else f"{'-':>14}"
        lines.append(f"{name:36} {cores:6.2f} {per}")
    total = sum(result["cores"].values())
    lines.append(f"{'all of them':36} {total:6.2f}   of {os.cpu_count()} cores")
    if svg.exists():
        samples, frames = hottest_frames(svg)
        share = samples / (100 * window) if window else 0
        lines += [
            "",
            f"Python in {result.get('spied', 'the Python worker')} holding the GIL: "
            f"{samples} samples at 100/s = {share:.0%} of "
            f"the window (flame graph: {svg.name})",
            f"{'samples':>8}  frame (inclusive)",
        ]
        lines += [f"{n:8}  {name}" for n, name in frames]
    if result.get("jvm_threads"):
        recorded = summary(jfr) if jfr and jfr.exists() else None
        lines += ["", *jvm_report(result["jvm_threads"], recorded, window, rate)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", default="enrich-50ms")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument(
        "--at", type=float, default=0.2, help="share of the output visible when the window starts"
    )
    parser.add_argument("--label", default="", help="a suffix for the result files")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="settings for this run (repeatable): profile a variant under --label",
    )
    args = parser.parse_args(argv)
    known = {c.name: c for c in cases(quick=False)}
    if args.case not in known:
        sys.exit(f"error: no case {args.case!r}: one of {', '.join(known)}")
    case = replace(known[args.case], records=args.records, budget_s=None)  # its whole input
    stem = f"profile-{case.name}" + (f"-{args.label}" if args.label else "")
    svg, txt = RESULTS / f"{stem}.svg", RESULTS / f"{stem}.txt"
    jfr = LOGS / f"{stem}.jfr"  # large: kept with the logs, summarised in the .txt
    svg.unlink(missing_ok=True)
    use_tuning(args.sets)
    system = "project-tuned" if args.sets else "project"
    with broker_and_service(case.latency_ms) as (broker, service):
        others = {"Kafka broker": broker.pid(), "enrichment service": service.pid_file.live()}
        sampler = Sampler(
            case,
            args.window,
            svg,
            others,
            in_the_jvm=in_the_jvm(case, args.sets),
            jfr=jfr,
            at=args.at,
        )
        source = fill_input(case, broker.bootstrap)
        try:
            run = measure(
                case,
                system,
                1,
                broker.bootstrap,
                service.url,
                deadline_s(case),
                source,
                during=sampler,
            )
        finally:
            delete_topics(broker.bootstrap, [source])
    if run.error or sampler.result is None:
        sys.exit(f"error: no profile: {run.error or 'the run ended before its window'}")
    label = "settings: " + ", ".join(args.sets) if args.sets else "the job's defaults"
    text = report(case.name, label, sampler.result, svg, jfr)
    txt.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
