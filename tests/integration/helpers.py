"""Running real jobs from tests: a `pipelines run` subprocess whose output is watched."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.host import jars
from pipelines.host.paths import local_state
from pipelines_dev.ports import free_ports
from tests.support import CLI, PROGRESS, ROOT, Started, cli_for

# The job-owned secret of test_own_settings_job, in the environment of the shared second
# cluster's daemons (tests/conftest.py second_cluster): unique to this run, so that finding
# it anywhere is a leak of this run.
PRICING_TOKEN = f"canaryPRICING{secrets.token_hex(6)}"
SECOND_CLUSTER_DIR = local_state("flink-second")  # under .local: `make clean` stops it too


class RunningJob(Started):
    """`pipelines run ...` in the background, as a user runs it in a terminal (or, with
    `sigint_ignored`, as a script or CI runner starts it: SIGINT inherited as ignored)."""

    def __init__(self, *args: str, env: dict | None = None, sigint_ignored: bool = False):
        super().__init__([*CLI, "run", *args], env=env, sigint_ignored=sigint_ignored)

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                match = re.search(pattern, line)
                if match:
                    return match
            if self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                break
            time.sleep(0.2)
        raise AssertionError(f"never saw /{pattern}/; output:\n{self.output[-4000:]}")

    def checkpoints(self) -> tuple[int, int]:
        """(completed, failed) from the latest progress line."""
        for line in reversed(self.lines):
            match = PROGRESS.search(line)
            if match:
                return int(match.group(1)), int(match.group(2))
        return 0, 0

    def rest(self, path: str = "") -> dict:
        """A document of the job's REST API (the CLI prints the address): /jobs/<id><path>.
        30 s for the answer: with 5, a loaded machine's (load average 22) timed out inside
        a wait that had minutes left, and the socket error ended the test."""
        match = self.wait_for(r"as ([0-9a-f]{32}) \(REST/UI at (http://[0-9.:]+)\)", 60)
        job_id, url = match.group(1), match.group(2)
        with urllib.request.urlopen(f"{url}/jobs/{job_id}{path}", timeout=30) as resp:
            return json.load(resp)

    def checkpoint_stats(self) -> dict:
        """The job's /checkpoints document: counts, history, what it was restored from."""
        return self.rest("/checkpoints")

    def restored(self) -> dict | None:
        """What Flink says this run was restored from ({id, external_path, is_savepoint,
        ...}), or None for a fresh start."""
        return (self.checkpoint_stats().get("latest") or {}).get("restored")

    def parallelism(self) -> dict[str, int]:
        """Each operator chain's parallelism, as Flink runs it."""
        return {v["name"]: v["parallelism"] for v in self.rest()["vertices"]}

    def signal(self, signum: int = signal.SIGINT) -> None:
        self.proc.send_signal(signum)

    def interrupt(self, timeout: float = 120) -> int:
        """Ctrl-C, then wait for the CLI to stop the job and exit."""
        self.signal(signal.SIGINT)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.end()


# A fresh copy of the project (what a team that copies the template has), run with this
# venv: nothing a test does in it leaks into the working tree.
SKIP = shutil.ignore_patterns(
    ".git", ".venv", ".local", "dist", "__pycache__", "lib", "build", ".pytest_cache", "*.egg-info"
)


def fresh_copy(tmp_path, kafka: str | None = None):
    """The copy and the environment to run it with; its own tests share the broker at
    `kafka` (PIPELINES_TEST_KAFKA) instead of starting one of their own."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT, copy, ignore=SKIP)
    env = {**os.environ, "PIPELINES_JAR_LIB": str(jars.LIB_DIR)}
    env["PYTHONPATH"] = str(copy)
    if kafka:
        env["PIPELINES_TEST_KAFKA"] = kafka
    return copy, env


def cli(copy, env, *args, timeout=60):
    """`pipelines ...` or, for a developer command, `pipelines-dev ...` in a copy."""
    return subprocess.run(
        [*cli_for(args), *args],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def another_cluster(state: Path, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """A standalone cluster besides the local one: its own state dir (under .local, so that
    `make clean` stops it too if a run is killed first), free ports, started from `cwd` with
    `env`; yields its JobManager's address and stops it."""
    rest, rpc = free_ports(), free_ports()
    env = {**env, "PIPELINES_FLINK_DIR": str(state), "PIPELINES_FLINK_REST_PORT": str(rest),
           "PIPELINES_FLINK_RPC_PORT": str(rpc)}  # fmt: skip

    def cluster(action: str) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, "cluster", action], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=180)  # fmt: skip

    up = cluster("up")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield f"127.0.0.1:{rest}"
    finally:
        down = cluster("down")
        assert down.returncode == 0, down.stdout + down.stderr
