"""`make bench-latency`'s arithmetic: percentiles over every measured record (one never
seen is later than all seen ones), the p99 target check, and where the maximum rates
come from."""

from __future__ import annotations

import json

import pytest

from bench.latency import Point, broker_settled, max_rates, slices, summary, table

pytestmark = pytest.mark.unit


def test_percentiles_are_nearest_rank_over_all_records():
    latencies = [float(i) for i in range(1, 101)]  # 1 s .. 100 s
    assert summary(latencies, 100) == (50.0, 99.0, 100.0)


def test_a_record_never_seen_counts_as_later_than_every_seen_one():
    seen = [float(i) for i in range(1, 100)]  # 99 of 100 visible
    assert summary(seen, 100) == (50.0, 99.0, None)  # no max: one is still missing
    assert summary(seen[:98], 100) == (50.0, None, None)  # 98 seen: no p99 either
    assert summary([], 100) == (None, None, None)


def test_the_target_is_judged_at_half_load_only():
    def point(load, p99):
        return Point("copy-json", "project", load, 5.0, 1000.0, 990.0, 100, 100, 1.0, p99, 7.0)

    rows = table([point(0.5, 6.0), point(0.5, 6.2), point(0.9, 9.0)]).splitlines()
    assert [row.split()[9] for row in rows[2:5]] == ["yes", "no", "-"]


def test_maximum_rates_are_the_projects_medians_unless_given(tmp_path):
    results = tmp_path / "compare.json"
    results.write_text(
        json.dumps(
            {
                "summaries": [
                    {"case": "copy-json", "system": "project", "rates": [70.0, 80.0, 75.0]},
                    {"case": "copy-json", "system": "quix", "rates": [60.0]},
                    {"case": "enrich-50ms", "system": "project", "rates": []},
                ]
            }
        )
    )
    assert max_rates(results, []) == {"copy-json": 75.0}
    assert max_rates(results, ["enrich-50ms=30000"]) == {"copy-json": 75.0, "enrich-50ms": 30000.0}
    assert max_rates(tmp_path / "none.json", []) == {}


def test_slices_give_each_spans_p99_so_a_backlog_shows_its_shape():
    # 3 slices of 100 ids: the first slow (a warm-up backlog), the last with 2 never seen
    latency = {i: 5.0 if i < 100 else 0.5 for i in range(300) if i not in (298, 299)}
    latency[150], latency[240] = 3.0, 2.0
    assert slices(latency, 0, 300, 100) == [5.0, 0.5, None]  # 1 in 100 slow is not its p99
    assert slices(latency, 100, 250, 100) == [0.5, 2.0]  # the short last slice: 1 in 50 is


def test_the_broker_is_warm_when_two_points_in_a_row_agree_on_its_cpu():
    # Measured on a broker started with the run: 0.70 then 0.47 cores in the copy at 50%,
    # 0.27-0.29 once warm (0.27 and 0.26 in two points in a row on a broker in use)
    assert not broker_settled([])
    assert not broker_settled([0.27])  # one point says nothing of a trend
    assert not broker_settled([0.70, 0.47])
    assert not broker_settled([0.70, 0.47, 0.41])  # 10% of 0.47 is 0.047: still falling
    assert broker_settled([0.70, 0.47, 0.41, 0.38])
    assert broker_settled([0.27, 0.26])
    assert broker_settled([0.26, 0.27])
    assert broker_settled([0.0, 0.0])  # a broker not on this machine: nothing to wait for


def test_the_detail_lines_give_the_trend_and_the_cores():
    point = Point("copy-json", "project", 0.5, 1.0, 1000.0, 990.0, 100, 100, 0.6, 1.2, 1.5)
    point.slices_p99, point.cores = [4.0, 1.1, None], {"job": 1.25, "broker": 0.3}
    assert table([point]).splitlines()[-1] == (
        "copy-json project 50% 1 s: 4.00 1.10 -; job 1.25, broker 0.30"
    )
    bare = Point("copy-json", "project", 0.5, 1.0, 1000.0, 990.0, 100, 100, 0.6, 1.2, 1.5)
    assert "CPU in cores" not in table([bare])
