"""The limits a benchmark case's rate is held against, measured in the same run as the jobs.

A rate means little alone: 30,000 enriched records/s is excellent if the service answers
35,000 and poor if the parse stage alone runs 75,000. Each case is held against the
smallest of the limits that apply to it:

- **service max**: what the enrichment service answers at the case's latency when driven
  by a load generator that is neither the job nor the peer (`wrk`, a compiled HTTP load
  tool from Debian's packages), POSTing the batches the job sends, at growing concurrency;
- **JVM-only copy**: the project's `copy-bytes` rate in the same run (a record that never
  leaves the JVM: what the broker, the source and the exactly-once sink allow);
- **parse-only**: the project's `copy-json` rate in the same run (every record through the
  Python worker and back, without lookups);
- **capacity / latency**: the most lookups a subtask keeps in flight (`max_capacity` where
  the bound adapts) over one service round trip.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pipelines.running import registry
from pipelines.running.processes import ProcessGroups

COMPANIES = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"]
MOST_CONNECTIONS = 2560
REQUESTS = re.compile(r"^Requests/sec:\s+([\d.]+)", re.M)
NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
SOCKET_ERRORS = re.compile(r"Socket errors:.*")


@dataclass
class ServiceMax:
    records_per_s: float | None
    connections: int = 0
    note: str = ""  # why there is no figure, or what the figure came from


def wrk_script(batch: int) -> str:
    """A wrk Lua script POSTing one batch of `batch` companies, as the job's client does."""
    body = ",".join(f'\\"{COMPANIES[i % len(COMPANIES)]}\\"' for i in range(batch))
    return (
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.body = "{{\\"companies\\": [{body}]}}"\n'
    )


def parse_wrk(output: str) -> tuple[float | None, str]:
    """(requests/s, the reason it does not count) from wrk's report: a run with failed
    requests or socket errors is not a maximum of the service answering."""
    found = REQUESTS.search(output)
    if found is None:
        return None, "wrk printed no Requests/sec"
    failed = NON_2XX.search(output)
    if failed:
        return None, f"{failed.group(1)} non-2xx answers"
    errors = SOCKET_ERRORS.search(output)
    if errors:
        return None, errors.group(0).strip()
    return float(found.group(1)), ""


def service_max(url: str, duration_s: int = 6) -> ServiceMax:
    """The service's best batch-lookup rate in records/s, POSTing the enrich job's batches
    (`default_batching`): concurrency doubles from its batches in flight until the rate
    stops growing by a tenth (the service is then the limit, not the round trips in
    flight), with one wrk thread so the service keeps the other core."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return ServiceMax(None, note="not measured: wrk is not installed (apt-get install wrk)")
    best = ServiceMax(None, note="no clean wrk run")
    batch, connections = default_batching()
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        script = Path(tmp) / "batch.lua"
        script.write_text(wrk_script(batch))
        while connections <= MOST_CONNECTIONS:
            owner = ProcessGroups()
            try:
                proc = owner.popen(
                    [wrk, "-t1", f"-c{connections}", f"-d{duration_s}s", "--timeout", "10s"]
                    + ["-s", str(script), f"{url}/lookup/batch"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                output, _ = proc.communicate(timeout=duration_s + 60)
            except subprocess.TimeoutExpired:
                return ServiceMax(best.records_per_s, best.connections, "wrk did not finish")
            finally:
                owner.end()
            rate, reason = parse_wrk(output)
            if rate is None:  # failing answers: more concurrency only fails more
                if best.records_per_s is None:
                    best.note = f"not measured: {reason} at {connections} connections"
                return best
            previous = best.records_per_s
            if previous is None or rate * batch > previous:
                best = ServiceMax(
                    rate * batch,
                    connections,
                    f"wrk, {connections} connections x batches of {batch}",
                )
            if previous is not None and rate * batch < previous * 1.1:
                return best
            connections *= 2
    return best


def enrich_defaults():
    """The enrich job's committed enrichment settings: what the limits are measured for."""
    from pipelines.settings.loader import load_settings

    return load_settings(
        "enrich", sections=registry.load("enrich").sections, local=False
    ).settings.enrichment


def default_capacity() -> int:
    """The most lookups the enrich job keeps in flight per subtask, from its committed
    config: its `max_capacity` where the bound adapts, else its `capacity`."""
    cfg = enrich_defaults()
    return cfg.max_capacity or cfg.capacity


def default_batching() -> tuple[int, int]:
    """(records a batch, batches in flight) of the enrich job's committed config: the batch
    wrk POSTs and the concurrency it starts from."""
    cfg = enrich_defaults()
    return cfg.effective_batch_size(), cfg.elements_in_flight()


def capacity_of(args: list[str], default: int) -> int:
    """The capacity a run's `--set` arguments give it, or `default`."""
    for arg in args:
        if arg.startswith("enrichment.capacity="):
            return int(arg.split("=", 1)[1])
    return default


def case_limits(
    kind: str,
    latency_ms: int,
    capacity: int,
    jvm_copy: float | None,
    parse_only: float | None,
    service: float | None,
) -> dict[str, float]:
    """The limits that apply to a case, by name; the case's limit is their minimum."""
    limits: dict[str, float] = {}
    if jvm_copy and kind != "copy-bytes":
        limits["JVM-only copy"] = jvm_copy
    if kind == "enrich":
        if parse_only:
            limits["parse-only"] = parse_only
        if service:
            limits["service max"] = service
        if latency_ms:
            limits["capacity/latency"] = capacity / (latency_ms / 1000)
    return limits
