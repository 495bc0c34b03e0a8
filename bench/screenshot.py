"""`make prometheus-screenshot`: the picture in docs/operations.md (Watching a job).

A local enrich run on the local broker with a steady trickle of demo input (one record in 50
malformed), a Prometheus scraping its reporter, and an enrichment outage in the middle of
the run; then headless Chromium photographs Prometheus's own graph page: records in, out
and to dead letters, and the consumer lag, over the run. Everything it starts is in process
groups it ends on every path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

from pipelines.host.paths import PROJECT_ROOT, local_state
from pipelines.running.processes import ProcessGroups
from pipelines_dev.demo import demo_values
from pipelines_dev.enrichment_service import Service
from pipelines_dev.ports import free_ports
from pipelines_dev.prometheus import Prometheus
from pipelines_dev.topics import create_topics, delete_topics, produce

OUT = PROJECT_ROOT / "docs" / "images" / "prometheus-enrich.png"
PER_S, BAD_EVERY, BURST = 200, 50, 150_000


def graph_url(prom: Prometheus, job: str, minutes: int) -> str:
    """Prometheus's classic graph page (the one Debian's package serves) with two panels."""
    panels = [
        f'{{__name__=~"pipelines:(records_in|records_out|dead_letters):total",job_name="{job}"}}',
        f'pipelines:consumer_lag:records{{job_name="{job}"}}',
    ]
    query = {}
    for i, expr in enumerate(panels):
        query.update({f"g{i}.expr": expr, f"g{i}.tab": "0", f"g{i}.range_input": f"{minutes}m"})
    return f"{prom.url}/classic/graph?{urllib.parse.urlencode(query)}"


def photograph(url: str, out: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit(
            "chromium is not installed: apt-get install --no-install-recommends chromium"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    groups = ProcessGroups()
    try:
        proc = groups.popen(
            [
                chromium,
                "--headless=new",
                "--no-sandbox",  # as root, Chromium refuses to start with its sandbox
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1280,1500",
                "--virtual-time-budget=15000",
                f"--screenshot={out}",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        proc.wait(timeout=120)
    finally:
        groups.end()
    if not out.is_file():
        raise SystemExit(f"chromium wrote no {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--minutes", type=int, default=4)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    tag = f"watch-{uuid.uuid4().hex[:6]}"
    topics = {f"{tag}-in": 3, f"{tag}-out": 3, f"{tag}-dlq": 1}
    create_topics(args.bootstrap, topics)
    first = free_ports(3)
    service = Service(port=first, state_dir=local_state("screenshot"))
    reporter = first + 1
    prom = Prometheus(
        port=first + 2,
        targets=[f"127.0.0.1:{reporter}"],
        state_dir=local_state("screenshot", "prometheus"),
        interval="1s",
    )
    groups = ProcessGroups()
    job: subprocess.Popen | None = None
    try:
        service.up(latency_ms=20)
        prom.up()
        sets = {
            "kafka.bootstrap_servers": args.bootstrap,
            "source.topics": f"[{tag}-in]",
            "source.group_id": tag,
            "sink.topic": f"{tag}-out",
            "sink.dead_letter_topic": f"{tag}-dlq",
            "sink.transactional_id_prefix": tag,
            "demo_service.url": service.url,
            "checkpoint.interval": "2s",
            "metrics.prometheus_port": str(reporter),
        }
        job = groups.popen(
            [sys.executable, "-m", "pipelines_dev.commands", "run", "enrich"]
            + [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=PROJECT_ROOT,
        )
        seconds = args.minutes * 60
        started, sent, burst_sent = time.monotonic(), 0, False
        outage = (seconds * 0.4, seconds * 0.55)
        while (elapsed := time.monotonic() - started) < seconds:
            if job.poll() is not None:
                raise SystemExit(f"the enrich run ended with {job.returncode}")
            service.configure(down=outage[0] <= elapsed < outage[1])
            # Once, a burst the job needs several seconds for: consumer lag to work off.
            count = BURST if not burst_sent and elapsed >= seconds * 0.7 else PER_S
            burst_sent = burst_sent or count == BURST
            values = demo_values(sent + count, bad_every=BAD_EVERY)[sent:]
            produce(args.bootstrap, f"{tag}-in", values)
            sent += len(values)
            time.sleep(1)
        photograph(graph_url(prom, "enrich", args.minutes), args.out)
        print(f"wrote {args.out} ({sent} records produced)")
    finally:
        if job is not None and job.poll() is None:
            os.killpg(job.pid, signal.SIGINT)  # the run's own stop: cancel, then exit
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        groups.end()
        prom.down()
        service.down()
        delete_topics(args.bootstrap, list(topics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
