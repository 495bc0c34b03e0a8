"""How the fault driver applies a freeze it cannot apply at once: `docker pause` again
within a bound, then SIGSTOP of the processes (CI saw runc refuse a pause with "unable to
freeze" right after a broker restart, and the trial ended in an error, not a finding)."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from pipelines_dev.containers import DockerError
from pipelines_dev.faults import retried, signal_all

pytestmark = pytest.mark.unit


def refusing(times: int):
    calls: list[float] = []

    def attempt() -> None:
        calls.append(time.monotonic())
        if len(calls) <= times:
            raise DockerError(f"`docker pause x` failed: unable to freeze ({len(calls)})")

    return attempt, calls


def test_a_pause_that_succeeds_at_once_reports_no_refusal():
    attempt, calls = refusing(0)
    assert retried(attempt, bound_s=5, pause_s=0.01) == []
    assert len(calls) == 1


def test_a_refused_pause_is_applied_again_and_the_refusals_are_reported():
    attempt, calls = refusing(2)
    errors = retried(attempt, bound_s=5, pause_s=0.01)
    assert errors == [
        "`docker pause x` failed: unable to freeze (1)",
        "`docker pause x` failed: unable to freeze (2)",
    ]
    assert len(calls) == 3


def test_a_pause_refused_past_the_bound_raises_the_last_refusal_in_time():
    attempt, calls = refusing(10**6)
    started = time.monotonic()
    with pytest.raises(DockerError, match=r"unable to freeze \(\d+\)"):
        retried(attempt, bound_s=0.3, pause_s=0.05)
    assert time.monotonic() - started < 2
    assert len(calls) >= 2


def _state(pid: int) -> str:
    return subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip


def test_the_signal_freeze_stops_and_resumes_real_processes():
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        signal_all([p.pid for p in procs], signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not all(_state(p.pid).startswith("T") for p in procs):
            assert time.monotonic() < deadline, [_state(p.pid) for p in procs]
            time.sleep(0.05)
        signal_all([p.pid for p in procs] + [2**22 + 1], signal.SIGCONT)  # one long gone
        deadline = time.monotonic() + 10
        while any(_state(p.pid).startswith("T") for p in procs):
            assert time.monotonic() < deadline, [_state(p.pid) for p in procs]
            time.sleep(0.05)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_refused_docker_action_of_a_fault_is_noted_or_fails_naming_why(monkeypatch):
    import random

    from pipelines_dev import faults as chaos

    ctx = chaos.Context(None, "passthrough", "", {}, [], random.Random(0))  # type: ignore[arg-type]
    monkeypatch.setattr(chaos, "FAULT_RETRY_S", 5.0)
    monkeypatch.setattr(chaos.time, "sleep", lambda s: None)
    attempt, _ = refusing(1)
    chaos.applied(ctx, "kill kafka-3", attempt)
    assert ctx.log[-1].endswith(
        "kill kafka-3: applied after 1 refused (`docker pause x` failed: unable to freeze (1))"
    )
    monkeypatch.setattr(chaos, "FAULT_RETRY_S", 0.0)
    attempt, _ = refusing(10**6)
    with pytest.raises(chaos.ChaosError, match=r"^could not start kafka-3 within 0 s: `docker"):
        chaos.applied(ctx, "start kafka-3", attempt)
