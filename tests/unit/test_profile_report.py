"""`make profile`'s reading of py-spy's flame graph and its report: frames summed across
stacks by their inclusive counts, and CPU turned into microseconds per record."""

from __future__ import annotations

import pytest

from bench.profile import hottest_frames, report

pytestmark = pytest.mark.unit

SVG = """<svg><g><title>all (1,200 samples, 100%)</title></g>
<g><title>run (a.py:1) (1,000 samples, 83.33%)</title></g>
<g><title>loads (j.py:41) (300 samples, 25%)</title></g>
<g><title>loads (j.py:41) (50 samples, 4.17%)</title></g>
<g><title>f&lt;locals&gt;.g (b.py:9) (1 sample, 0.08%)</title></g></svg>"""


def test_frames_seen_on_several_stacks_are_summed_and_names_unescaped(tmp_path):
    svg = tmp_path / "p.svg"
    svg.write_text(SVG)
    total, frames = hottest_frames(svg)
    assert total == 1200
    assert frames == [(1000, "run (a.py:1)"), (350, "loads (j.py:41)"), (1, "f<locals>.g (b.py:9)")]


def test_report_gives_cores_per_record_and_the_gil_share(tmp_path):
    svg = tmp_path / "p.svg"
    svg.write_text(SVG)
    result = {"window_s": 20.0, "rate": 20_000.0, "cores": {"JVM": 0.4, "worker": 0.5}}
    text = report("enrich-50ms", "the job's defaults", result, svg).splitlines()
    assert text[0].startswith("profile of enrich-50ms (the job's defaults): 20 s window at 20,000")
    assert text[4].split() == ["worker", "0.50", "25.0"]  # 0.5 core / 20,000 per s = 25 µs
    assert text[5].split() == ["JVM", "0.40", "20.0"]
    assert text[6].split()[:4] == ["all", "of", "them", "0.90"]
    assert "1200 samples at 100/s = 60% of the window" in "\n".join(text)
