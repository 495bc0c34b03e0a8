"""A real Prometheus for watching jobs here: Debian's `prometheus` package, installed by
the project's set-up where it is missing, started and stopped like the other local
services (`pipelines-dev prometheus up|down|status`), listening on 127.0.0.1 only. It scrapes
the Flink reporters of local runs (metrics.prometheus_port) and evaluates the alert rules
a team deploys, deploy/prometheus/*.rules.yml, so a rule is tried on real series before
it pages anyone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipelines.host.paths import PROJECT_ROOT, local_state
from pipelines.running.processes import PidFile, end_groups, wait_started
from pipelines.settings.schema import LOCAL_REPORTER_PORTS

log = logging.getLogger(__name__)

RULES_DIR = PROJECT_ROOT / "deploy" / "prometheus"
DEFAULT_PORT = int(os.environ.get("PIPELINES_PROMETHEUS_PORT", "9090"))
# metrics.prometheus_port's default range: a local run's JVM takes the first free one.
REPORTER_PORTS = range(LOCAL_REPORTER_PORTS[0], LOCAL_REPORTER_PORTS[1] + 1)


class PrometheusError(Exception):
    """Prometheus is missing, could not start, or did not answer."""


def _installed(name: str) -> str | None:
    """On PATH, or where Debian's package puts it (a PATH without /usr/bin still finds it)."""
    return shutil.which(name) or (
        f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").is_file() else None
    )


def binary(name: str = "prometheus") -> str:
    """The installed `prometheus` or `promtool`, or one line saying how to get it."""
    found = _installed(name)
    if not found:
        raise PrometheusError(
            f"{name} is not installed: `make prometheus` installs Debian's prometheus package "
            "(apt-get install prometheus), or put your own on PATH"
        )
    return found


def install() -> str:
    """Install Debian's package (it brings `prometheus` and `promtool`) where it is missing;
    its post-install starts no daemon without an init system, and we start none."""
    if _installed("prometheus") and _installed("promtool"):
        return "prometheus already installed"
    apt = shutil.which("apt-get")
    if not apt or os.geteuid() != 0:
        raise PrometheusError(
            "prometheus is not installed and this user cannot install it: run "
            "`sudo apt-get install --no-install-recommends prometheus`"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt_get(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([apt, *args], env=env, capture_output=True, text=True)

    package = ("install", "-y", "--no-install-recommends", "prometheus")
    done = apt_get(*package)
    if done.returncode != 0:  # a fresh machine's package lists may be missing or stale
        apt_get("update")
        done = apt_get(*package)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PrometheusError(f"apt-get install prometheus failed: {last}")
    return "prometheus installed (Debian package)"


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.rules.yml"))


@dataclass
class Prometheus:
    """One Prometheus server on 127.0.0.1:port with its own config and storage under
    state_dir; `targets` are the host:port of Flink reporters to scrape."""

    port: int = DEFAULT_PORT
    targets: list[str] = field(default_factory=lambda: [f"127.0.0.1:{p}" for p in REPORTER_PORTS])
    state_dir: Path = field(default_factory=lambda: local_state("prometheus"))
    interval: str = "5s"  # scrape and rule evaluation

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> PidFile:
        return PidFile(self.state_dir / f"prometheus-{self.port}.pid", "prometheus", "prom    ")

    @property
    def log_path(self) -> Path:
        return self.state_dir / f"prometheus-{self.port}.log"

    def config(self) -> dict:
        return {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
            "rule_files": [str(p) for p in rule_files()],
            "scrape_configs": [
                {
                    "job_name": "flink",
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                return resp.status == 200
        except Exception:  # noqa: BLE001 - not up (yet)
            return False

    def up(self, wait_s: float = 60) -> None:
        if self.pid_file.live() and self.ready():
            log.info(f"prom     running at {self.url}")
            return
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        conf = self.state_dir / f"prometheus-{self.port}.yml"
        conf.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        with open(self.log_path, "ab") as out:
            proc = subprocess.Popen(
                [
                    binary(),
                    f"--config.file={conf}",
                    f"--storage.tsdb.path={self.state_dir / f'data-{self.port}'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1d",
                    "--web.enable-lifecycle",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write(proc.pid)
        if wait_started(proc, self.ready, wait_s):
            log.info(f"prom     started at {self.url} (pid {proc.pid})")
            return
        self.pid_file.remove()
        if proc.returncode is not None:
            raise PrometheusError(
                f"prometheus exited with {proc.returncode}: {self._last_log_line()} "
                f"(log: {self.log_path})"
            )
        end_groups([proc.pid])
        raise PrometheusError(f"prometheus did not become ready at {self.url} in {wait_s:.0f} s")

    def _last_log_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1] if lines else "no log"

    def down(self) -> None:
        pid = self.pid_file.live()
        if pid is None:
            log.info("prom     not running")
            return
        end_groups([pid])  # started in a session of its own: its group id is its pid
        self.pid_file.remove()
        log.info("prom     stopped")

    def status(self) -> str:
        if self.pid_file.live() and self.ready():
            return f"prom     running at {self.url}, rules from {RULES_DIR}"
        return f"prom     not running (expected at {self.url})"

    def _get(self, path: str, **params: str) -> object:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as resp:
                body = json.load(resp)
        except Exception as exc:  # noqa: BLE001 - one line for whatever failed
            raise PrometheusError(f"prometheus at {self.url}{path}: {exc}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"prometheus at {self.url}{path}: {body.get('error')}")
        return body["data"]

    def query(self, promql: str) -> dict[str, float]:
        """An instant vector as {labels as text: value}; a scalar as {"": value}."""
        data = self._get("/api/v1/query", query=promql)
        assert isinstance(data, dict)
        if data["resultType"] == "scalar":
            return {"": float(data["result"][1])}
        return {
            ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items())): float(r["value"][1])
            for r in data["result"]
        }

    def value(self, promql: str) -> float | None:
        """The one value of a query that sums to a single series (None: no data)."""
        result = self.query(promql)
        if len(result) > 1:
            raise PrometheusError(f"{promql} gave {len(result)} series, not one")
        return next(iter(result.values()), None)

    def alerts(self) -> list[dict]:
        data = self._get("/api/v1/alerts")
        assert isinstance(data, dict)
        return list(data["alerts"])

    def targets_up(self) -> list[str]:
        data = self._get("/api/v1/targets", state="active")
        assert isinstance(data, dict)
        return [t["scrapeUrl"] for t in data["activeTargets"] if t["health"] == "up"]


__all__ = ["Prometheus", "PrometheusError", "binary", "install", "rule_files"]
