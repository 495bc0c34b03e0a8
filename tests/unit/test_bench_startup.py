"""bench.startup's timeline: each phase from the moment before it, medians per case."""

from __future__ import annotations

import pytest

from bench.startup import Timeline, table

pytestmark = pytest.mark.unit


def test_each_phase_runs_from_the_moment_before_it():
    timeline = Timeline({"client": 0.4, "submit": 4.0, "deploy": 6.5, "checkpoint": 6.6})
    assert timeline.phases() == pytest.approx(
        {"client": 0.4, "submit": 3.6, "deploy": 2.5, "checkpoint": 0.1}
    )  # "visible" never came: no phase for it, and none after a missing one


def test_the_table_gives_each_phases_median_and_the_whole():
    runs = [
        Timeline({"client": c, "submit": c + 3, "deploy": c + 5, "checkpoint": c + 5.5,
                  "visible": c + 6})
        for c in (0.5, 0.7, 2.0)
    ]  # fmt: skip
    row = table({"copy-json": runs}).splitlines()[2].split()
    assert row == ["copy-json", "3", "0.70s", "3.00s", "2.00s", "0.50s", "0.50s", "6.70s"]
