"""PyFlink's gateway JVM in a process group of ours: started with its output drained to a
bounded tail and a log, its temp dir ours, its logs free of the environment; disconnected
before it is ended. Written for apache-flink 2.2.1's internals (tests/unit/test_flink_compat.py
runs each against the pinned wheel)."""

from __future__ import annotations

import functools
import os
import subprocess
import threading
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from pipelines.flink.class_archive import with_class_archive
from pipelines.host.loopback import preload_env
from pipelines.host.paths import local_state, private_dir, write_whole


@contextmanager
def gateway_in_group(owner):
    """Start PyFlink's gateway JVM (the local mini-cluster) in a new process group owned
    by `owner` (a processes.ProcessGroups); everything the JVM starts inherits the group.

    PyFlink 2.2: `java_gateway.launch_gateway()` calls `launch_gateway_server_process`,
    which calls `pyflink_gateway_server.Popen`; both names are swapped for the call only.
    The JVM's stderr (a pipe PyFlink never reads) is drained into a bounded tail, so a
    chatty JVM can never block on a full pipe.
    """
    import pyflink.java_gateway as java_gateway
    import pyflink.pyflink_gateway_server as gateway_server

    original_launch = java_gateway.launch_gateway_server_process
    original_popen = gateway_server.Popen

    def popen_in_group(*args, **kwargs):
        # The JVM's stdout too: PyFlink leaves it on the terminal, where a restarting job's
        # uncaught-exception traces (40 lines each) flooded the progress lines.
        kwargs.setdefault("stdout", subprocess.PIPE)

        kwargs["env"] = preload_env(kwargs.get("env") or dict(os.environ))
        if args and isinstance(args[0], list):
            scratch = owner.scratch_dir("pipelines-jvm-")
            command = with_class_archive(with_reporters(args[0]))
            args = (in_temp_dir(command, scratch), *args[1:])
        proc = subprocess.Popen(*args, process_group=0, **kwargs)
        owner.adopt(proc.pid)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                GATEWAY_STDERR.follow(stream)
        return proc

    def launch(env, args):
        # Its log in a 0700 directory of ours with the environment kept out: by default it
        # is site-packages/pyflink/log (0644), and the Python workers' environment (a job
        # section's `${env:}` secret among it) was logged there when they closed.
        env.setdefault("FLINK_LOG_DIR", str(private_dir(local_state("logs"))))
        env.setdefault("LOG4J_PROPERTIES", str(gateway_log_config()))
        gateway_server.Popen = popen_in_group
        try:
            return original_launch(env, args)
        finally:
            gateway_server.Popen = original_popen

    java_gateway.launch_gateway_server_process = launch
    try:
        yield
    finally:
        java_gateway.launch_gateway_server_process = original_launch


# Flink and Beam log a process's whole environment, and environments hold secrets (a job
# config's `${env:}` values, a job section's secrets on a TaskManager): PythonEnvUtils logs
# the `flink run` client's Python process's at INFO (the canary test found the truststore
# password there); Beam's DefaultJobBundleFactory logs a Python worker's (the TaskManager's
# environment) at INFO when the worker closes and at WARN when its clean-up fails.
QUIET_ENVIRONMENT_LOGS = """
# pipelines: these two log a process's whole environment (its secrets) at INFO or WARN
logger.pythonenv.name = org.apache.flink.client.python.PythonEnvUtils
logger.pythonenv.level = WARN
logger.workerenv.name = org.apache.beam.runners.fnexecution.control.DefaultJobBundleFactory
logger.workerenv.level = ERROR
"""


def quiet_environment_logs(path: Path, start: Path | None = None) -> None:
    """QUIET_ENVIRONMENT_LOGS appended (once) to the log4j properties file `path`, or to a
    copy of `start` where `path` does not exist yet. Written whole, by a rename: two local
    runs starting at once (two test workers) each wrote the file in two steps, and one could
    read the other's half-written file and append to it."""
    if path.exists():
        text = path.read_text()
    else:
        text = start.read_text() if start else ""
    if "logger.workerenv.name" in text:
        return
    whole = text.rstrip("\n") + "\n" + QUIET_ENVIRONMENT_LOGS
    write_whole(path, lambda partial: partial.write_text(whole))


def gateway_log_config() -> Path:
    """The local gateway JVM's log4j config: the wheel's CLI config, environment kept out."""
    import pyflink

    path = private_dir(local_state("flink-gateway")) / "log4j-cli.properties"
    quiet_environment_logs(path, Path(pyflink.__file__).parent / "conf" / "log4j-cli.properties")
    return path


def reporter_jars() -> list[Path]:
    """The wheel's Prometheus reporter (plugins/metrics-prometheus)."""
    import pyflink

    root = Path(pyflink.__file__).parent / "plugins" / "metrics-prometheus"
    return sorted(root.glob("flink-metrics-prometheus-*.jar"))


def with_reporters(command: list[str]) -> list[str]:
    """The gateway command with the Prometheus reporter on its class path. A mini-cluster
    finds reporter factories on its class path only, not in the plugins directory a
    cluster reads ("could not be found for reporter prom. Available factories: []"); the
    jar is inert unless metrics.reporter.* names it."""
    if "-cp" not in command:
        return command
    at = command.index("-cp") + 1
    extra = [str(p) for p in reporter_jars()]
    return [*command[:at], os.pathsep.join([command[at], *extra]), *command[at + 1 :]]


@functools.cache
def imports_of_a_launch() -> None:
    """Import, on the caller's thread, what PyFlink's gateway launch imports on first use
    (its config reader, the host name codec), so that a launch on another thread imports
    nothing (pipelines.testing starts its gateway on a thread while the caller imports
    Beam): two threads importing at once can each be handed the other's module half made
    (Python's way out of an import deadlock). Once per process: imported modules stay."""
    gateway_command()
    "localhost".encode("idna")


def gateway_command() -> list[str]:
    """The command a local gateway JVM starts with here (PyFlink's, the reporter jars on
    its class path), found by asking PyFlink to launch one with a Popen that only records
    what it was given."""
    import pyflink.java_gateway as java_gateway
    import pyflink.pyflink_gateway_server as gateway_server

    seen: list[list[str]] = []

    def record(command, **kwargs):
        seen.append(command)
        raise _Recorded

    original_popen = gateway_server.Popen
    gateway_server.Popen = record
    try:
        java_gateway._find_flink_home()
        gateway_server.launch_gateway_server_process(
            dict(os.environ), ["-c", "org.apache.flink.client.python.PythonGatewayServer", "local"]
        )
    except _Recorded:
        pass
    finally:
        gateway_server.Popen = original_popen
    return with_reporters(seen[0])


class _Recorded(Exception):
    """gateway_command's Popen: the command is recorded, nothing started."""


def in_temp_dir(command: list[str], directory: Path) -> list[str]:
    """The gateway command with its JVM's temp dir, and so the mini-cluster's io.tmp.dirs
    (its working directory, blob store, extracted RPC jar), in `directory`: the JVM is
    ended, not closed, so it never removes them itself, and the owner removes the
    directory once the JVM is gone."""
    return [command[0], f"-Djava.io.tmpdir={directory}", *command[1:]]


class _StderrTail:
    """The gateway JVM's output: its last lines kept for error messages, all of it in a
    log file once `log_to` names one (a local run's .local/logs/<job>-jvm.log)."""

    def __init__(self, lines: int = 50):
        self.lines: deque[str] = deque(maxlen=lines)
        self.path: Path | None = None
        self._file: TextIO | None = None
        self._lock = threading.Lock()

    def log_to(self, path: Path) -> None:
        self.path = path

    def _write(self, line: str) -> None:
        """Append to the log; where it cannot be written (a read-only image), keep only the
        tail: the pump must go on draining, or the JVM blocks on a full pipe."""
        if self.path is None:
            return
        try:
            if self._file is None or self._file.name != str(self.path):
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
                self.path.chmod(0o600)  # also a log an older run left 0644
            self._file.write(line + "\n")
            self._file.flush()
        except OSError:
            self.path, self._file = None, None

    def follow(self, stream) -> None:
        def pump():
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip()
                self.lines.append(line)
                if self.path is not None:
                    with self._lock:
                        self._write(line)

        threading.Thread(target=pump, name="gateway-output", daemon=True).start()


GATEWAY_STDERR = _StderrTail()


def disconnect_gateway() -> None:
    """Mark PyFlink's Py4J client disconnected before its JVM is ended, so that nothing
    (Py4J's finalizers releasing Java objects at exit, say) tries to reach a dead JVM and
    logs a stack trace. A flag only (py4j 0.10.9: `GatewayClient.is_connected`): no
    network call on the way out."""
    import pyflink.java_gateway as java_gateway

    gateway = getattr(java_gateway, "_gateway", None)
    if gateway is not None:
        gateway._gateway_client.is_connected = False


def gateway_started() -> bool:
    """Whether this process has a PyFlink gateway already (PyFlink 2.2: `_gateway`)."""
    import pyflink.java_gateway as java_gateway

    return getattr(java_gateway, "_gateway", None) is not None
