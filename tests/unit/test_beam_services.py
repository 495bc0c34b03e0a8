"""How a failed Beam run learns that one of its Java services died, with real processes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from pipelines.beam.java import JavaServices, dead_service


def _services(tmp_path, proc) -> JavaServices:
    log_path = tmp_path / "worker.log"
    log_path.write_text("starting\nlast words\n")
    return JavaServices(1, 2, {"Java worker": (proc, log_path)})


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_a_service_that_exits_within_the_grace_is_named_with_its_log(tmp_path):
    proc = _sleeper()
    try:
        threading.Timer(0.5, proc.kill).start()
        reason = dead_service(_services(tmp_path, proc), grace_s=30)
    finally:
        proc.kill()
        proc.wait()
    assert reason is not None
    assert reason.startswith("Beam's Java worker exited (-9) while the pipeline ran; see ")
    assert reason.endswith("last words")


def test_live_services_are_no_reason_and_cost_only_the_grace(tmp_path):
    proc = _sleeper()
    try:
        started = time.monotonic()
        assert dead_service(_services(tmp_path, proc)) is None
        assert dead_service(_services(tmp_path, proc), grace_s=0.3) is None
        waited = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
    assert 0.3 <= waited < 10
