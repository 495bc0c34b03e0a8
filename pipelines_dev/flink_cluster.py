"""A local standalone Flink cluster, started from the PyFlink wheel's own distribution.

The wheel ships `bin/start-cluster.sh` and a `conf/`; we copy the conf into a project-owned
directory (never edit site-packages), point FLINK_CONF_DIR at it, and put the venv's `bin`
first on PATH so the cluster's Python workers run the project's interpreter.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipelines.flink.distribution import flink_home
from pipelines.flink.environment import FLINK_BIND_OPTIONS, PROMETHEUS_REPORTER
from pipelines.flink.gateway import quiet_environment_logs
from pipelines.host.loopback import preload_env
from pipelines.host.paths import local_state
from pipelines.running.processes import command_lines, end_groups, group_alive, groups_of_ours

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0  # as flink-daemon.sh's guaranteed_kill: SIGTERM, then SIGKILL
STATE_DIR = Path(os.environ.get("PIPELINES_FLINK_DIR", local_state("flink")))
DEFAULT_REST_PORT = int(os.environ.get("PIPELINES_FLINK_REST_PORT", "8081"))
DEFAULT_RPC_PORT = int(os.environ.get("PIPELINES_FLINK_RPC_PORT", "6123"))
# The standalone cluster's daemons take theirs above the range local runs use (9249-9259).
CLUSTER_REPORTER_PORTS = "9260-9269"


class ClusterError(Exception):
    """The cluster could not be started or reached; the message says why."""


def _set(tree: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def rest_overview(url: str, timeout: float = 2.0) -> dict | None:
    """A JobManager's /overview (TaskManagers, slots, jobs); None when none answers."""
    try:
        with urllib.request.urlopen(f"{url}/overview", timeout=timeout) as resp:
            return json.load(resp)
    except Exception:  # noqa: BLE001 - not up (yet), or not a JobManager
        return None


@dataclass(frozen=True)
class Cluster:
    state_dir: Path = STATE_DIR
    rest_port: int = DEFAULT_REST_PORT
    rpc_port: int = DEFAULT_RPC_PORT  # a second cluster on this machine needs another
    slots: int = int(os.environ.get("PIPELINES_FLINK_SLOTS", "2"))

    @property
    def conf_dir(self) -> Path:
        return self.state_dir / "conf"

    @property
    def lib_dir(self) -> Path:
        return self.state_dir / "lib"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def tmp_dir(self) -> Path:
        """The daemons' io.tmp.dirs (a TaskManager's working directory, blob stores, the
        extracted RPC jar), removed by `down`: a killed TaskManager never removes its own,
        and in /tmp they outlived the runs (30 tm_localhost* directories after one CI)."""
        return self.state_dir / "tmp"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def environ(self) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        env = dict(os.environ)
        env.update(
            {
                "FLINK_CONF_DIR": str(self.conf_dir),
                "FLINK_LOG_DIR": str(self.log_dir),
                "FLINK_LIB_DIR": str(self.lib_dir),
                "PATH": f"{venv_bin}:{env.get('PATH', '')}",
            }
        )

        return preload_env(env)

    def write_lib(self) -> None:
        """lib/ of the wheel plus opt/flink-python: without it the JobManager cannot load
        the Python operators (ClassNotFoundException: ExternalPythonProcessOperator)."""
        shutil.rmtree(self.lib_dir, ignore_errors=True)
        self.lib_dir.mkdir(parents=True)
        home = flink_home()
        for jar in [*(home / "lib").glob("*.jar"), *(home / "opt").glob("flink-python-*.jar")]:
            (self.lib_dir / jar.name).symlink_to(jar)

    def write_conf(self) -> None:
        self.write_lib()
        shutil.copytree(flink_home() / "conf", self.conf_dir, dirs_exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        for directory in (self.state_dir, self.log_dir, self.tmp_dir):
            directory.chmod(0o700)
        path = self.conf_dir / "config.yaml"
        tree = yaml.safe_load((flink_home() / "conf" / "config.yaml").read_text()) or {}
        for key, value in {
            "rest.port": self.rest_port,
            "rest.address": "127.0.0.1",
            # Every listener Flink has a bind option for, on loopback by configuration (the
            # shim is then needed only for those with none: docs/security.md).
            **{key: "127.0.0.1" for key in FLINK_BIND_OPTIONS},
            "taskmanager.host": "127.0.0.1",
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": self.rpc_port,
            "jobmanager.memory.process.size": "1200m",
            "taskmanager.numberOfTaskSlots": self.slots,
            "taskmanager.memory.process.size": "2560m",
            "python.executable": sys.executable,
            "python.client.executable": sys.executable,
            "io.tmp.dirs": str(self.tmp_dir),
            "web.tmpdir": str(self.tmp_dir),  # the REST server's upload dir, else in /tmp
            # The daemons' pid files, /tmp by default: shared by every checkout on the
            # machine, so one's stop-cluster.sh could signal another's TaskManager.
            "env.pid.dir": str(self.state_dir),
            # Each daemon serves /metrics on the first free port of the range (the wheel's
            # plugins/metrics-prometheus); the loopback shim binds it to 127.0.0.1.
            "metrics.reporter.prom.factory.class": PROMETHEUS_REPORTER,
            "metrics.reporter.prom.port": os.environ.get(
                "PIPELINES_FLINK_METRICS_PORTS", CLUSTER_REPORTER_PORTS
            ),
        }.items():
            _set(tree, key, value)
        path.write_text(yaml.safe_dump(tree, sort_keys=False))
        quiet_client_environment_log(self.conf_dir)

    def overview(self, timeout: float = 2.0) -> dict | None:
        return rest_overview(self.url, timeout)

    def up(self, wait_s: float = 90.0) -> None:
        info = self.overview()
        if info and info.get("taskmanagers", 0) >= 1:
            log.info(f"flink    running at {self.url} ({info['slots-total']} slots)")
            return
        self.write_conf()
        code, err = self._start_daemons("start-cluster.sh")
        if code != 0:
            raise ClusterError(f"start-cluster.sh failed: {err.strip()[-500:]}")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            info = self.overview()
            if info and info.get("taskmanagers", 0) >= 1:
                log.info(
                    f"flink    started at {self.url} ({info['slots-total']} slots, logs {self.log_dir})"
                )
                return
            time.sleep(0.5)
        raise ClusterError(
            f"the cluster did not report a TaskManager within {wait_s:.0f}s; "
            f"see {self.log_dir}:\n{self.log_tail()}"
        )

    def down(self) -> None:
        if not self.conf_dir.is_dir():
            log.info("flink    not running")
            return
        # Everything the start scripts started shares their process groups (a TaskManager's
        # Python workers too: they were seen outliving a TaskManager that died). Ending the
        # groups is what stop-cluster.sh does (SIGTERM, SIGKILL 10 s later), for all daemons
        # at once and without the JVM it starts per daemon to read the config: 8-9 s per
        # stop idle, up to 47 s on a busy machine, before.
        groups = self.recorded_groups()
        if groups:
            end_groups(groups, grace_s=STOP_GRACE_S)
        else:  # started by hand or before groups were recorded: the scripts' pid files
            subprocess.run(
                [str(flink_home() / "bin" / "stop-cluster.sh")],
                env=self.environ(),
                capture_output=True,
                text=True,
                timeout=120,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.overview(0.5):
            time.sleep(0.5)
        self.groups_file.unlink(missing_ok=True)
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        for pid_file in self.state_dir.glob("flink-*.pid"):  # a killed daemon's stays
            pid_file.unlink(missing_ok=True)
        log.info("flink    stopped")

    @property
    def groups_file(self) -> Path:
        return self.conf_dir.parent / "process-groups"

    def recorded_groups(self) -> list[int]:
        """The recorded process groups that are still this cluster's: a live member names
        its conf dir (the daemons' command lines, the Python workers' FLINK_CONF_DIR). A
        group id that now belongs to another program is left alone, with a line saying so."""
        try:
            recorded = [int(g) for g in self.groups_file.read_text().split()]
        except (OSError, ValueError):
            return []
        ours = groups_of_ours(recorded, str(self.conf_dir))
        stale = [g for g in recorded if g not in ours and group_alive(g)]
        if stale:
            log.info(
                f"flink    left alone process group(s) {', '.join(map(str, stale))} of "
                f"{self.groups_file}: no longer this cluster's"
            )
        return ours

    def _start_daemons(self, script: str, *args: str, timeout_s: float = 120.0) -> tuple[int, str]:
        """Run a Flink start script in a session of its own: the daemons it forks keep that
        process group, which `down` ends. Returns (exit code, stderr). A script that does
        not return in time is ended with its group: one ClusterError, nothing left."""
        path = script if "/" in script else str(flink_home() / "bin" / script)
        proc = subprocess.Popen(
            [path, *args],
            env=self.environ(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            umask=0o077,  # the daemons' logs, checkpoints and blobs: this user's alone
        )
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            end_groups([proc.pid], grace_s=2.0)
            proc.communicate()
            raise ClusterError(
                f"{Path(path).name} {' '.join(args)} did not return within {timeout_s:.0f} s; "
                f"it was stopped with what it started (logs: {self.log_dir})"
            ) from None
        # Only the groups still ours are kept: the file does not grow run after run.
        live = [g for g in self.recorded_groups() if g != proc.pid]
        self.groups_file.parent.mkdir(parents=True, exist_ok=True)
        self.groups_file.write_text("".join(f"{g}\n" for g in [*live, proc.pid]))
        return proc.returncode, err

    def status(self) -> str:
        info = self.overview()
        if not info:
            return f"flink    not running (expected at {self.url})"
        return (
            f"flink    running at {self.url}: {info['taskmanagers']} taskmanager(s), "
            f"{info['slots-available']}/{info['slots-total']} slots free, "
            f"{info['jobs-running']} job(s) running"
        )

    def taskmanager_pids(self) -> list[int]:
        conf = str(self.conf_dir)
        return [
            pid
            for pid, cmd in command_lines().items()
            if "TaskManagerRunner" in cmd and conf in cmd
        ]

    def start_taskmanager(self, wait_s: float = 60.0) -> None:
        """Start one more TaskManager (e.g. after one was killed)."""
        code, err = self._start_daemons("taskmanager.sh", "start")
        if code != 0:
            raise ClusterError(f"taskmanager.sh start failed: {err.strip()[-500:]}")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            info = self.overview()
            if info and info.get("taskmanagers", 0) >= 1:
                return
            time.sleep(0.5)
        raise ClusterError(f"no TaskManager registered within {wait_s:.0f}s")

    def job(self, job_id: str) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}/jobs/{job_id}", timeout=5) as resp:
                return json.load(resp)
        except Exception:  # noqa: BLE001
            return None

    def log_tail(self, lines: int = 20) -> str:
        logs = sorted(self.log_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
        if not logs:
            return "(no log written)"
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-lines:])


def quiet_client_environment_log(conf_dir: Path) -> None:
    """Keep every process's environment (its secrets) out of the logs of the `flink run`
    client and the daemons that read `conf_dir` (flink/gateway.py QUIET_ENVIRONMENT_LOGS)."""
    for name in ("log4j-cli.properties", "log4j.properties", "log4j-console.properties"):
        if (conf_dir / name).exists():
            quiet_environment_logs(conf_dir / name)


def client_dirs() -> dict[str, str]:
    """FLINK_CONF_DIR and FLINK_LOG_DIR for a `flink run` client on a machine whose local
    cluster never started: the wheel's own conf with the environment kept out of the log,
    and logs under .local/ (not in the wheel's site-packages, readable by all)."""
    root = Path(local_state("flink-client"))
    conf, logs = root / "conf", root / "log"
    shutil.copytree(flink_home() / "conf", conf, dirs_exist_ok=True)
    quiet_client_environment_log(conf)
    logs.mkdir(parents=True, exist_ok=True)
    for directory in (root, logs):
        directory.chmod(0o700)
    return {"FLINK_CONF_DIR": str(conf), "FLINK_LOG_DIR": str(logs)}
