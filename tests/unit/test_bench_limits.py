"""`make bench`'s limit column: wrk's report read (a run with failures is no maximum), the
limits that apply to each case, and the table's share of the smallest."""

from __future__ import annotations

import json

import pytest

from bench.compare import Summary, limits_text, table
from bench.limits import capacity_of, case_limits, default_batching, parse_wrk, wrk_script
from pipelines.running import registry
from pipelines.settings.loader import load_settings

pytestmark = pytest.mark.unit

CLEAN = """Running 6s test @ http://127.0.0.1:8765/lookup/batch
  1 threads and 160 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    82.14ms    9.61ms 142.08ms   84.50%
    Req/Sec     1.95k   143.22     2.15k    88.33%
  11640 requests in 6.01s, 13.37MB read
Requests/sec:   1936.44
Transfer/sec:      2.22MB
"""


def test_a_clean_wrk_run_gives_its_requests_per_second():
    assert parse_wrk(CLEAN) == (1936.44, "")


def test_failed_answers_or_socket_errors_are_no_maximum():
    failing = CLEAN.replace("Requests/sec", "  Non-2xx or 3xx responses: 17\nRequests/sec")
    assert parse_wrk(failing) == (None, "17 non-2xx answers")
    timeouts = CLEAN.replace(
        "Requests/sec", "  Socket errors: connect 0, read 0, write 0, timeout 12\nRequests/sec"
    )
    assert parse_wrk(timeouts) == (None, "Socket errors: connect 0, read 0, write 0, timeout 12")
    assert parse_wrk("unable to connect to 127.0.0.1:1 Connection refused") == (
        None,
        "wrk printed no Requests/sec",
    )


def test_the_script_posts_one_batch_of_the_jobs_size():
    enrichment = load_settings(
        "enrich", sections=registry.load("enrich").sections, local=False
    ).settings.enrichment
    batch, in_flight = default_batching()
    assert (batch, in_flight) == (enrichment.batch_size, enrichment.capacity // batch)
    script = wrk_script(batch)
    body = script.split('wrk.body = "', 1)[1].rsplit('"', 1)[0].replace('\\"', '"')
    assert len(json.loads(body)["companies"]) == enrichment.batch_size
    assert 'wrk.method = "POST"' in script


def test_capacity_comes_from_the_runs_settings_or_the_default():
    assert capacity_of(["--set", "enrichment.capacity=16000"], 8000) == 16000
    assert capacity_of(["--set", "python.bundle_size=80"], 8000) == 8000


def test_each_kind_of_case_is_held_against_the_limits_that_apply():
    assert case_limits("copy-bytes", 0, 8000, 120_000.0, 70_000.0, None) == {}
    assert case_limits("copy-json", 0, 8000, 120_000.0, 70_000.0, None) == {
        "JVM-only copy": 120_000.0
    }
    assert case_limits("enrich", 50, 8000, 120_000.0, 70_000.0, 400_000.0) == {
        "JVM-only copy": 120_000.0,
        "parse-only": 70_000.0,
        "service max": 400_000.0,
        "capacity/latency": 160_000.0,
    }
    assert case_limits("enrich", 500, 8000, None, None, None) == {"capacity/latency": 16_000.0}


def test_the_table_shows_shares_of_the_smallest_limit_and_of_each_peer():
    summaries = [
        Summary("enrich-50ms", "project", rates=[30_000.0, 35_000.0, 40_000.0], rss=[900.0]),
        Summary("enrich-50ms", "quix", rates=[1_750.0]),
        Summary("enrich-50ms", "bytewax", rates=[1_000.0]),
        Summary("enrich-50ms", "bytewax-tuned", rates=[70_000.0]),
    ]
    limits = {"enrich-50ms": {"parse-only": 70_000.0, "capacity/latency": 160_000.0}}
    rows = table(summaries, limits).splitlines()
    assert rows[0].split()[5:13] == ["x", "quix", "x", "bwax", "x", "bwt", "of", "lim"]
    project, quix = rows[2].split(), rows[3].split()
    assert project[3:9] == ["35,000", "40,000", "20.00", "35.00", "0.50", "50%"]
    assert project[-4] == "900"  # then CPU s/M, broker, service: none measured here
    assert quix[5:9] == ["1.00", "1.75", "0.03", "2%"]
    text = limits_text(limits, {"enrich-50ms": "wrk, 640 connections x batches of 200"})
    assert "*parse-only 70,000, capacity/latency 160,000" in text
    assert "[service: wrk, 640 connections" in text
