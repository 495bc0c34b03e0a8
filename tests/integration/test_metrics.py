"""Watching a job the way production teams do: a real Prometheus (Debian's package, started
by the project) scrapes a local enrich run's Flink reporter and evaluates the alert rules of
deploy/prometheus/. PromQL reconciles the job's counts with what a read_committed reader
finds, and the enrichment-failure alert goes pending, then firing, when the service fails."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter

import pytest

from pipelines_dev.demo import demo_values
from pipelines_dev.ports import free_ports
from pipelines_dev.prometheus import Prometheus, rule_files
from pipelines_dev.topics import create_topics, produce, read_all
from tests.integration.helpers import RunningJob
from tests.support import topic_args

pytestmark = pytest.mark.integration

N, BAD_EVERY = 3000, 100
BAD = N // BAD_EVERY
JOB = 'job_name="enrich"'
TRICKLE_PER_S = 20
# While records flow, in - (out + dead letters) is what is in flight between the source
# and the sinks: a Python bundle holds up to python.bundle_time (1 s) of records, and the
# checkpoint interval is 1 s; the bound allows 5 s of input for a busy machine. The
# reporter reads each counter in turn, so a scrape can count at a sink a record that it
# did not yet count at the source: the low bound allows a few.
IN_FLIGHT_MAX = TRICKLE_PER_S * 5
SCRAPE_SKEW = 5


@pytest.fixture
def prom(tmp_path):
    """A Prometheus scraping one reporter port every second, rules loaded."""
    port = free_ports(2)
    server = Prometheus(
        port=port, targets=[f"127.0.0.1:{port + 1}"], state_dir=tmp_path / "prom", interval="1s"
    )
    server.up()
    yield server, port + 1
    server.down()


def _until(what: str, check, timeout: float = 180):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(1)
    raise AssertionError(f"{what} within {timeout:.0f} s; last seen: {last!r}")


class _Trickle(threading.Thread):
    """Produces valid records at a steady rate until stopped, so rates stay above zero."""

    def __init__(self, kafka: str, topic: str, start_id: int):
        super().__init__(daemon=True)
        self.kafka, self.topic, self.next_id = kafka, topic, start_id
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            values = demo_values(self.next_id + TRICKLE_PER_S)[self.next_id :]
            produce(self.kafka, self.topic, values)
            self.next_id += TRICKLE_PER_S


def test_prometheus_reconciles_the_enrich_job_and_its_enrichment_alert_fires(
    kafka, names, enrichment_service, prom
):
    server, reporter_port = prom
    create_topics(kafka, {names("in"): 3, names("out"): 3, names("dlq"): 1})
    produce(kafka, names("in"), demo_values(N, bad_every=BAD_EVERY))
    job = RunningJob(
        "enrich",
        *topic_args(kafka, names, dead_letters=True),
        "--set",
        f"demo_service.url={enrichment_service.url}",
        "--set",
        "enrichment.retries=0",
        "--set",
        "checkpoint.interval=1s",
        "--set",
        f"metrics.prometheus_port={reporter_port}",
    )
    trickle = _Trickle(kafka, names("in"), N)
    try:
        _until("Prometheus scraping the job's reporter", server.targets_up)

        # Quiescent: in = out + dead letters, each equal to what the broker holds.
        def counts():
            return {
                name: server.value(f"pipelines:{name}:total{{{JOB}}}")
                for name in ("records_in", "records_out", "dead_letters")
            }

        def settled():
            now = counts()
            if None in now.values() or now["records_in"] != N:
                return None
            return now if now["records_out"] + now["dead_letters"] == N else None

        counts_seen = _until("in = out + dead letters for all input", settled)
        expected = {"records_in": N, "records_out": N - BAD, "dead_letters": BAD}
        if counts_seen != expected:  # say why records were dead-lettered, not only how many
            reasons = Counter(json.loads(v)["error"] for v in read_all(kafka, names("dlq")))
            raise AssertionError(f"{counts_seen} != {expected}; dead letters: {dict(reasons)}")
        reconciled = (
            f"pipelines:records_in:total{{{JOB}}} - "
            f"(pipelines:records_out:total{{{JOB}}} + pipelines:dead_letters:total{{{JOB}}})"
        )
        assert server.query(reconciled) == {"job_name=enrich": 0.0}
        print(f"\n{reconciled} = 0 (in {N}, out {N - BAD}, dead letters {BAD})")
        _until(
            "the output committed",
            lambda: len(read_all(kafka, names("out"))) == N - BAD,
            timeout=120,
        )
        out = [json.loads(v)["id"] for v in read_all(kafka, names("out"))]
        assert sorted(out) == sorted(i for i in range(N) if i % BAD_EVERY != BAD_EVERY - 1)
        assert len(read_all(kafka, names("dlq"))) == BAD

        assert _until(
            "consumer lag 0", lambda: server.value(f"pipelines:consumer_lag:records{{{JOB}}}") == 0
        )
        completed = server.value(f"flink_jobmanager_job_numberOfCompletedCheckpoints{{{JOB}}}")
        assert completed is not None and completed >= 1
        # Flink's REST API caches checkpoint statistics for a few seconds: it catches up.
        _until(
            f"the REST API to count {completed:.0f} completed checkpoints",
            lambda: job.checkpoint_stats()["counts"]["completed"] >= completed,
            timeout=60,
        )
        assert server.value(f"flink_jobmanager_job_lastCheckpointDuration{{{JOB}}}") is not None
        assert server.value(f"flink_jobmanager_job_numRestarts{{{JOB}}}") == 0
        # A rule over a series Flink does not export never fires: each one the rules read
        # is scraped for this job (runningTime, for one, is Flink's default job-status set).
        rules = "\n".join(path.read_text() for path in rule_files())  # what the server loads
        read_by_rules = sorted(set(re.findall(r"\bflink_\w+", rules)))
        assert "flink_jobmanager_job_runningTime" in read_by_rules
        missing = [m for m in read_by_rules if server.value(f"count({m}{{{JOB}}})") is None]
        assert not missing, f"series the alert rules read that the job does not export: {missing}"
        lookups = server.value(f"sum(flink_taskmanager_job_task_operator_lookups{{{JOB}}})")
        assert lookups == N - BAD  # one attempt each: retries 0, and none failed

        # While records flow: in = out + dead letters + what is in flight.
        trickle.start()
        flowing_since = time.monotonic()
        _until(
            "the trickle counted at the sinks",
            lambda: (server.value(f"pipelines:records_out:total{{{JOB}}}") or 0) > N - BAD + 100,
        )
        window = f"[{int(time.monotonic() - flowing_since)}s:1s]"  # only while it flows
        low = server.value(f"min_over_time(({reconciled}){window})")
        high = server.value(f"max_over_time(({reconciled}){window})")
        assert low is not None and high is not None
        assert -SCRAPE_SKEW <= low <= high <= IN_FLIGHT_MAX, (low, high)

        # The service fails every request: the enrichment alert goes pending, then firing.
        enrichment_service.configure(down=True)

        def alert_in(state: str):
            return [
                a
                for a in server.alerts()
                if a["labels"]["alertname"] == "PipelinesEnrichmentFailing" and a["state"] == state
            ]

        _until(
            "PipelinesEnrichmentFailing pending", lambda: alert_in("pending") or alert_in("firing")
        )
        [firing] = _until("PipelinesEnrichmentFailing firing", lambda: alert_in("firing"))
        assert firing["labels"] == {
            "alertname": "PipelinesEnrichmentFailing",
            "job_name": "enrich",
            "severity": "page",
        }
        assert re.fullmatch(
            r"enrich: \d+(\.\d+)?% of lookups fail", firing["annotations"]["summary"]
        ), firing["annotations"]
        print(f"alert firing: {firing['labels']} {firing['annotations']['summary']}")
    finally:
        trickle.stop.set()
        if trickle.is_alive():
            trickle.join(30)
        assert job.interrupt() == 0, job.output
