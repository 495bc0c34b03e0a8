"""Where a job's JVM spends its CPU: per thread from the kernel, per frame from a JFR recording.

`bench.profile` runs this beside a job over the same window as its py-spy sample:

- `ThreadCpu` reads every thread's CPU time of the JVM (psutil: the kernel's count) at the
  start and end of the window and groups the threads by name (the source's fetcher, the
  task thread that runs the chained operators, the producer's network thread, GC, JIT):
  exact CPU, not a sample;
- `Recording` starts Java Flight Recorder in the running JVM with `jcmd PID JFR.start`
  (the JDK's own profiler, `settings=profile`: a stack every 10 ms of each thread running
  Java code) and dumps it at the end of the window;
- `summary` reads the recording with the JDK's `jfr print --json` and counts the samples
  by thread, by the frame on top (self) and by every distinct frame on the stack
  (inclusive).

`report` turns both into microseconds of CPU per record at the rate the observer saw.
A sample's share of the Java samples stands for the same share of the JVM's CPU in threads
that run Java; threads in native code (the embedded Python of thread mode, the JIT, GC) are
in the per-thread table only.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.running.processes import thread_cpu

NUMBERED = re.compile(r"[\d#\-_ ]+$|\(\d+\)")


def thread_group(name: str) -> str:
    """A thread's name without its number (`GC Thread#1` -> `GC Thread`), so the threads
    of one kind add up."""
    return NUMBERED.sub("", name).strip() or name


@dataclass
class ThreadCpu:
    """The CPU seconds each group of a process's threads used between `start` and `stop`."""

    pid: int
    before: dict[int, tuple[str, float]] = field(default_factory=dict)

    def start(self) -> None:
        self.before = thread_cpu(self.pid)

    def stop(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for tid, (name, after) in thread_cpu(self.pid).items():
            group = thread_group(name)
            used[group] = used.get(group, 0.0) + after - self.before.get(tid, (name, 0.0))[1]
        return used


class Recording:
    """A JFR recording of a running JVM, from `start` to `dump` (jcmd, the JDK's)."""

    NAME = "pipelines-bench"

    def __init__(self, pid: int, path: Path):
        self.pid, self.path = pid, path

    def _jcmd(self, *args: str) -> str:
        done = subprocess.run(
            ["jcmd", str(self.pid), *args], capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"jcmd {' '.join(args)}: {done.stdout.strip()} {done.stderr.strip()}"
            )
        return done.stdout

    def start(self) -> None:
        self.path.unlink(missing_ok=True)
        self._jcmd("JFR.start", f"name={self.NAME}", "settings=profile")

    def dump(self) -> None:
        self._jcmd("JFR.stop", f"name={self.NAME}", f"filename={self.path}")


def frame_name(frame: dict) -> str:
    method = frame["method"]
    return f"{method['type']['name']}.{method['name']}"


@dataclass
class Samples:
    """Counts of a recording's execution samples."""

    total: int = 0
    threads: Counter[str] = field(default_factory=Counter)  # by full name
    self_frames: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)

    def add(self, thread: str, frames: list[str]) -> None:
        self.total += 1
        self.threads[thread] += 1
        if frames:
            self.self_frames[frames[0]] += 1
        self.inclusive.update(set(frames))


def summary(recording: Path) -> Samples:
    """The execution samples of a JFR file, counted (the JDK's `jfr` reads it)."""
    done = subprocess.run(
        ["jfr", "print", "--json", "--stack-depth", "64", "--events", "jdk.ExecutionSample"]
        + [str(recording)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"jfr print {recording}: {done.stderr.strip()}")
    samples = Samples()
    for event in json.loads(done.stdout)["recording"]["events"]:
        values = event["values"]
        thread = (values.get("sampledThread") or {}).get("javaName") or "?"
        stack = values.get("stackTrace") or {"frames": []}
        samples.add(thread, [frame_name(f) for f in stack["frames"]])
    return samples


def per_record_us(seconds: float, window_s: float, rate: float) -> float:
    """CPU seconds used over a window, as microseconds per record at `rate` records/s."""
    return seconds / window_s / rate * 1e6 if rate and window_s else 0.0


def report(
    threads: dict[str, float], samples: Samples | None, window_s: float, rate: float, top: int = 20
) -> list[str]:
    """The JVM's CPU per record by thread group, then its Java samples by thread, self
    frame and inclusive frame, each weighted by the CPU of the threads that run Java."""
    total = sum(threads.values())
    lines = [
        f"JVM threads by CPU: {total / window_s:.2f} cores, "
        f"{per_record_us(total, window_s, rate):.2f} us/record",
        f"{'us/record':>10} {'share':>6}  thread group",
    ]
    for name, used in sorted(threads.items(), key=lambda kv: -kv[1])[:top]:
        share = used / total if total else 0
        lines.append(f"{per_record_us(used, window_s, rate):10.2f} {share:6.1%}  {name}")
    if samples is None or not samples.total:
        return lines
    # The Java samples stand for the CPU of the threads that were sampled running Java.
    java_s = sum(used for name, used in threads.items() if name in _sampled_groups(samples))
    us_per_sample = per_record_us(java_s, window_s, rate) / samples.total
    by_group: Counter[str] = Counter()
    for name, n in samples.threads.items():
        by_group[thread_group(name)] += n
    for title, counts in (
        ("Java samples by thread", by_group),
        ("self: the frame on top of the stack", samples.self_frames),
        ("inclusive: every frame on the stack, once a sample", samples.inclusive),
    ):
        lines += ["", f"{title} ({samples.total} samples; us/record of those threads' CPU)"]
        lines.append(f"{'us/record':>10} {'share':>6}  frame")
        for name, n in counts.most_common(top):
            lines.append(f"{n * us_per_sample:10.2f} {n / samples.total:6.1%}  {name}")
    return lines


def _sampled_groups(samples: Samples) -> set[str]:
    """The thread groups, as the kernel names them (the first 15 characters), that JFR sampled."""
    return {thread_group(name[:15]) for name in samples.threads}
