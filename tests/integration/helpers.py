"""Running real jobs from tests: a `pipelines run` subprocess whose output is watched."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time

from tests.conftest import CLI, ROOT, job_env

PROGRESS = re.compile(r"checkpoints (\d+) completed, (\d+) failed")


class RunningJob:
    """`pipelines run ...` in the background, as a user runs it in a terminal."""

    def __init__(self, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([*CLI, "run", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=job_env(env))
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                match = re.search(pattern, line)
                if match:
                    return match
            if self.proc.poll() is not None and not self._reader.is_alive():
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

    def checkpoint_stats(self) -> dict:
        """The job's /checkpoints document from its REST API (the CLI prints the address)."""
        import json
        import urllib.request

        match = self.wait_for(r"as ([0-9a-f]{32}) \(REST/UI at (http://[0-9.:]+)\)", 60)
        job_id, url = match.group(1), match.group(2)
        with urllib.request.urlopen(f"{url}/jobs/{job_id}/checkpoints", timeout=5) as resp:
            return json.load(resp)

    def interrupt(self, timeout: float = 120) -> int:
        """Ctrl-C, then wait for the CLI to stop the job and exit."""
        self.proc.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout: float = 300) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
