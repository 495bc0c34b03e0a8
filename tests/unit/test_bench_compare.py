"""`make bench`'s figures of one run: the rate over the 10%-90% span, a run cut by its
case's time budget rated over what it wrote (never failed for the ids it did not reach,
still failed for one seen twice), and the table saying which rows were cut."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.compare import (
    Case,
    Run,
    costs_text,
    figures,
    progress,
    rendered_from_json,
    results_text,
    summarise,
    systems_for,
    table,
    versus_best_text,
)

pytestmark = pytest.mark.unit


def steady(count: int, per_s: float, start: float = 10.0) -> list[float]:
    """Visible times of `count` records arriving at `per_s`, from `start`."""
    return [start + i / per_s for i in range(count)]


def test_a_complete_run_is_rated_over_its_middle_80_percent():
    times = steady(1000, 100.0)
    rate, startup, e2e, error = figures(times, 1000, 1000, 0.0, cut=False, error="")
    assert error == ""
    assert startup == 10.0
    assert rate == pytest.approx(100.0, rel=0.01)
    assert e2e == pytest.approx(1000 / times[-1])


def test_records_shown_a_checkpoint_at_a_time_are_rated_by_what_each_showed():
    # 150 records/s, each visible at the next whole second (a 1 s checkpoint): the 10% mark
    # shows at 11 s with 150 records, the 90% mark at 16 s with 900.
    times = [float(math.ceil(t)) for t in steady(1000, 150.0)]
    rate, _, _, error = figures(times, 1000, 1000, 0.0, cut=False, error="")
    assert error == ""
    assert rate == pytest.approx(150.0, rel=0.01)


def test_visibility_is_one_time_per_offset_the_broker_shows_and_never_goes_back():
    from bench.compare import note_visible

    times: list[float] = []
    note_visible(times, 3, 1.0)
    note_visible(times, 3, 1.05)  # nothing new
    note_visible(times, 2, 1.1)  # an older answer: nothing changes
    note_visible(times, 5, 1.2)
    assert times == [1.0, 1.0, 1.0, 1.2, 1.2]


def test_duplicates_are_what_the_reader_read_beyond_the_distinct_ids():
    times = steady(1000, 100.0)
    _, _, _, error = figures(times, 1000, 1000, 0.0, cut=False, error="", read=1003)
    assert error == "3 duplicates"
    _, _, _, error = figures(times, 1000, 1000, 0.0, cut=False, error="", read=1000)
    assert error == ""


def test_a_run_short_of_its_records_fails_unless_its_budget_cut_it():
    times = steady(400, 100.0)
    rate, _, e2e, error = figures(times, 400, 1000, 0.0, cut=False, error="")
    assert (rate, e2e, error) == (None, None, "400 of 1000 ids")

    rate, _, e2e, error = figures(times, 400, 1000, 0.0, cut=True, error="")
    assert error == ""
    assert rate == pytest.approx(100.0, rel=0.01)
    assert e2e == pytest.approx(400 / times[-1])


def test_a_cut_run_that_showed_a_record_twice_still_fails():
    times = steady(400, 100.0)
    _, _, _, error = figures(times, 390, 1000, 0.0, cut=True, error="")
    assert error == "10 duplicates"


def test_progress_is_by_records_or_by_the_budget_whichever_is_further():
    case = Case("enrich-50ms", "enrich", 600_000, 50, budget_s=30.0)
    assert progress(case, 60_000, None) == pytest.approx(0.1)
    assert progress(case, 60_000, 15.0) == pytest.approx(0.5)
    assert progress(case, 540_000, 3.0) == pytest.approx(0.9)
    assert progress(Case("copy-json", "copy-json", 1000), 500, 99.0) == 0.5


def test_the_table_says_which_runs_the_budget_cut_and_what_they_wrote():
    runs = [
        Run("enrich-50ms", "quix", rep, 1800.0, 2.6, 1600.0, seen, seen, cut=True, budget_s=45.0)
        for rep, seen in ((1, 54_000), (2, 55_100))
    ] + [Run("enrich-50ms", "quix", 3, 1900.0, 2.6, 1700.0, 600_000, 600_000, budget_s=45.0)]
    text = table(summarise(runs))
    assert "2 of 3 runs cut at 45 s of output (54,000-55,100)" in text  # the case's budget
    assert "1,800" in text and "1,900" in text


def _runs(rates: dict[tuple[str, str], float]) -> list[Run]:
    return [
        Run(case, system, 1, rate, 2.0, rate, 1000, 1000) for (case, system), rate in rates.items()
    ]


RATES = {
    ("copy-bytes", "project"): 120_000.0,
    ("copy-bytes", "project-alo"): 125_000.0,
    ("copy-json", "project"): 80_000.0,
    ("copy-json", "project-alo"): 100_000.0,
    ("copy-json", "quix"): 40_000.0,
    ("copy-json", "bytewax"): 125_000.0,
}


def test_each_row_is_held_against_quix_and_against_bytewax():
    lines = table(summarise(_runs(RATES))).splitlines()
    assert lines[0].split()[5:9] == ["x", "quix", "x", "bwax"]
    row = {tuple(line.split()[:2]): line.split() for line in lines[2:]}
    # exactly once beside Quix's exactly once; at least once beside Bytewax
    assert row[("copy-json", "project")][5:7] == ["2.00", "0.64"]
    assert row[("copy-json", "project-alo")][5:7] == ["2.50", "0.80"]
    assert "at least once (sink.delivery)" in " ".join(row[("copy-json", "project-alo")])
    assert row[("copy-bytes", "project")][5:7] == ["-", "-"]  # no peer ran that case


def test_the_costs_of_exactly_once_and_of_the_bridge_come_from_the_same_run():
    assert costs_text(summarise(_runs(RATES))).splitlines() == [
        "what exactly once costs (project / project-alo, 1 s checkpoints): "
        "copy-bytes 0.96, copy-json 0.80",
        "what the Python bridge costs (copy-json / copy-bytes, at least once): 0.80 "
        "(each record is handed to Python, parsed and written back as JSON)",
    ]
    assert costs_text(summarise(_runs({("copy-json", "project"): 1.0}))) == ""


def test_the_job_is_set_against_bytewax_at_its_best_with_each_ones_cpu():
    runs = _runs({**RATES, ("copy-json", "bytewax-tuned"): 160_000.0})
    for run in runs:
        run.cpu = {"own": 12.0 if run.system == "project" else 4.0}
    assert versus_best_text(summarise(runs)).splitlines() == [
        "against Bytewax at its best (project exactly once / bytewax-tuned at least once):",
        "  copy-json        80,000 /   160,000 = 0.50x   CPU s/M 12.0 / 4.0",
    ]
    assert versus_best_text(summarise(_runs(RATES))) == ""  # no bytewax-tuned in the run


def test_the_text_is_rendered_again_from_the_runs_json(tmp_path):
    import json
    from dataclasses import asdict

    summaries = summarise(_runs({**RATES, ("copy-json", "bytewax-tuned"): 160_000.0}))
    limits = {"copy-bytes": {}, "copy-json": {"JVM-only copy": 120_000.0}}
    path = tmp_path / "compare.json"
    path.write_text(
        json.dumps(
            {
                "summaries": [asdict(s) for s in summaries],
                "limits": limits,
                "service_max": {"records_per_s": {}, "notes": {}},
            }
        )
    )
    text = rendered_from_json(path)
    assert text == results_text(summaries, limits, {})
    assert "*JVM-only copy 120,000" in text and "= 0.50x" in text


def test_the_full_run_has_the_at_least_once_row_in_every_case():
    for case in ("copy-bytes", "copy-json", "enrich"):
        names = systems_for(Case(case, case, 1000), tuned=True)
        assert {"project", "project-alo", "quix", "bytewax"} <= set(names)
    assert "project-alo" not in systems_for(Case("copy-json", "copy-json", 1000), tuned=False)
    # both execution modes in every case with a Python stage; the enrichment's operator
    # before flowing beside it
    for case, kind in (("copy-json", "copy-json"), ("enrich-5ms", "enrich")):
        assert "project-process" in systems_for(Case(case, kind, 1000, 5), tuned=True)
    assert "project-process" not in systems_for(Case("copy-bytes", "copy-bytes", 1000), tuned=True)
    assert "project-batched" in systems_for(Case("enrich-50ms", "enrich", 1000, 50), tuned=True)
    assert "project-batched" not in systems_for(Case("copy-json", "copy-json", 1000), tuned=True)


def test_thread_mode_is_measured_at_parallelism_2_where_the_process_mode_is():
    """Thread mode's tasks in one TaskManager share one interpreter: its scaling is a row."""
    for case, kind in (("copy-json", "copy-json"), ("enrich-50ms", "enrich")):
        names = systems_for(Case(case, kind, 1000, 50), tuned=True)
        assert {"project-p2", "project-process-p2"} <= set(names)
    assert "project-process-p2" not in systems_for(Case("enrich-5ms", "enrich", 1000, 5), True)


def test_the_two_taskmanager_cluster_rows_run_only_when_asked_and_submit_to_it(monkeypatch):
    import bench.compare as compare

    case = Case("enrich-5ms", "enrich", 1000, 5)
    assert not set(compare.CLUSTER_SYSTEMS) & set(systems_for(case, tuned=True))
    assert set(compare.CLUSTER_SYSTEMS) <= set(systems_for(case, True, cluster=True))
    args = ("in", "127.0.0.1:9092", "http://127.0.0.1:8765", "/tmp/state")
    with pytest.raises(RuntimeError, match="needs the bench cluster up"):
        compare.system_command("project-cluster-p2", case, "tag", *args)

    class Up:
        address = "127.0.0.1:18081"

    monkeypatch.setattr(compare, "CLUSTER", Up())
    command = compare.system_command("project-cluster-p2-alo", case, "tag", *args)
    assert command[1:5] == ["-m", "pipelines_dev.commands", "submit", "enrich"]
    assert command[-3:] == ["--stop-on-exit", "--jobmanager", "127.0.0.1:18081"]
    assert "run" not in command and "--skip-preflight" not in command
    sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
    assert {"job.parallelism=2", "sink.delivery=at-least-once"} <= set(sets)


def test_the_cpu_meter_adds_the_processes_of_one_group_and_counts_a_gone_one_as_nothing():
    """bench.profile labels processes by kind: two of one kind (two Python workers) add up
    rather than one overwriting the other, as they did when it kept a dict by label."""
    import subprocess
    import sys

    from bench.compare import CpuMeter

    burn = "import time\nwhile time.process_time() < 0.3: pass\ninput()"  # 0.3 s, then idle
    workers = [subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE)
               for _ in range(2)]  # fmt: skip
    try:
        meter = CpuMeter({"workers": {w.pid for w in workers}, "gone": {2**22 + 1}})
        meter.start()
        started = time.monotonic()
        while any(_cpu(w.pid) < 0.28 for w in workers):  # /proc counts in 10 ms ticks
            assert time.monotonic() - started < 60, "the workers did not burn their CPU"
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        cores = meter.stop()
    finally:
        for w in workers:
            w.kill()
            w.wait()
    used = cores["workers"] * elapsed  # CPU seconds, give or take the start-up before start()
    assert 0.35 < used < 0.9, cores  # one process alone would be 0.3
    assert cores["gone"] == 0.0


def _cpu(pid: int) -> float:
    from pipelines.running.processes import cpu_seconds

    return cpu_seconds(pid) or 0.0


def test_cpu_per_record_counts_each_process_from_its_first_sample_to_its_last(monkeypatch):
    """The system's CPU per million records over the span the samples cover: a worker that
    appears later counts from when it is first seen, one gone keeps what it used until
    its last sample, and the broker is counted apart from the system."""
    import bench.compare as compare

    cpu = {1: 10.0, 9: 50.0}
    monkeypatch.setattr(compare, "cpu_seconds", lambda pid: cpu.get(pid))
    own = {1}
    meter = compare.CpuPerRecord(lambda: {"own": set(own), "broker": {9}})
    meter.sample(100_000)
    cpu.update({1: 12.0, 2: 3.0, 9: 50.5})  # a Python worker appears with 3 s used
    own.add(2)
    meter.sample(300_000)
    cpu.update({1: 13.0, 9: 51.0})
    del cpu[2]  # the worker ended after using 3 + 1 s: its last second is counted below
    cpu[2] = 4.0
    meter.sample(500_000)
    del cpu[2]  # gone before the last sample: counted up to the one before
    cpu.update({1: 14.0, 9: 51.2})
    meter.sample(600_000)
    per_m = meter.per_million()
    assert per_m["own"] == pytest.approx((14.0 - 10.0 + 4.0 - 3.0) / 500_000 * 1e6)
    assert per_m["broker"] == pytest.approx(1.2 / 500_000 * 1e6)


def test_cpu_per_record_needs_two_samples_apart():
    from bench.compare import CpuPerRecord

    meter = CpuPerRecord(lambda: {"own": set()})
    assert meter.per_million() == {}
    meter.sample(10)
    assert meter.per_million() == {}


def test_the_table_gives_each_systems_cpu_per_million_records_and_the_brokers_apart():
    runs = [
        Run("copy-json", "project", rep, 100_000.0, 9.0, 40_000.0, 10, 10,
            cpu={"own": own, "broker": 2.0, "service": 0.0, "observer": 0.5})
        for rep, own in ((1, 8.0), (2, 9.0), (3, 30.0))
    ]  # fmt: skip
    runs.append(Run("copy-json", "bytewax", 1, 90_000.0, 1.0, 80_000.0, 10, 10, cpu={"own": 11.0}))
    text = table(summarise(runs))
    header, _, project, peer = text.splitlines()
    assert header.split()[-4:] == ["s/M", "broker", "svc", "notes"]
    assert project.split()[-3:] == ["9.0", "2.0", "0.0"]  # medians
    assert peer.split("  at least once")[0].split()[-3:] == ["11.0", "-", "-"]


def test_bytewax_at_its_best_runs_beside_the_stock_bytewax_as_two_processes():
    from bench.compare import system_command

    for case in (Case("copy-json", "copy-json", 10), Case("enrich-5ms", "enrich", 10, 5)):
        assert systems_for(case, tuned=True)[-2:] == ["bytewax", "bytewax-tuned"]
        command = system_command(
            "bytewax-tuned", case, "t", "in", "127.0.0.1:9092", "http://127.0.0.1:1", "/s"
        )
        assert command[1:3] == ["-m", "bench.peers.bytewax_lean"]
        assert command[command.index("--processes") + 1] == "2"
        assert ("--url" in command) == (case.kind == "enrich")
    assert "bytewax-tuned" not in systems_for(Case("copy-json", "copy-json", 10), tuned=False)


UNWIND = """
import os, signal, sys
from bench.compare import stop_on_signals
stop_on_signals()
try:
    os.kill(os.getpid(), signal.{first})
    signal.pause()
finally:
    os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while it stops what it started
    os.kill(os.getpid(), signal.SIGTERM)
    print("unwound", flush=True)
"""


@pytest.mark.parametrize("first, code", [("SIGINT", -signal.SIGINT), ("SIGTERM", 143)])
def test_a_benchmark_unwinds_to_the_end_of_its_finally_whatever_signals_follow(first, code):
    done = subprocess.run(
        [sys.executable, "-c", UNWIND.format(first=first)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout == "unwound\n", done.stderr
    assert done.returncode == code, done.stderr
