"""A real single-node Kafka 4.x broker (KRaft, combined mode) run from its Maven jars.

No Docker engine is assumed. The broker's runtime closure is resolved by `mvn` from
jars/broker/pom.xml into .local/kafka/libs; data, config and logs live beside it.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.devtools.ports import port_free
from pipelines.kafka_clients import quiet_logger
from pipelines.paths import PROJECT_ROOT, local_state

log = logging.getLogger(__name__)

STATE_DIR = Path(os.environ.get("PIPELINES_KAFKA_DIR", local_state("kafka")))
POM = PROJECT_ROOT / "jars" / "broker" / "pom.xml"
DEFAULT_PORT = int(os.environ.get("PIPELINES_KAFKA_PORT", "9092"))


# A one-node cluster: without these, transactions and group commits hang. Shared with the
# container broker (devtools/containers.py), so both brokers the tests use behave alike.
SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
}


class BrokerError(Exception):
    """The broker could not be set up or started; the message carries the log's last lines."""


@dataclass(frozen=True)
class Broker:
    state_dir: Path = STATE_DIR
    port: int = DEFAULT_PORT
    transaction_max_timeout_ms: int | None = None  # None: Kafka's default (900000)
    controller_port: int | None = None  # None: port + 1

    @property
    def ctl_port(self) -> int:
        """The KRaft controller listener; a second port the broker binds besides `port`."""
        return self.controller_port if self.controller_port is not None else self.port + 1

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def libs(self) -> Path:
        return self.state_dir / "libs"

    @property
    def data(self) -> Path:
        return self.state_dir / "data"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "broker.log"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "broker.pid"

    # ------------------------------------------------------------------ set-up

    def ensure_libs(self) -> None:
        from pipelines.maven import copy_dependencies, is_resolved

        if is_resolved(POM, self.libs):
            return
        log.info(f"resolving the Kafka broker's jars with mvn into {self.libs}")
        problem = copy_dependencies(POM, self.libs)
        if problem:
            raise BrokerError(f"mvn could not resolve the broker from {POM}: {problem}")

    def _write_config(self) -> Path:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ctl = self.ctl_port
        lines = [
            "process.roles=broker,controller",
            "node.id=1",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{ctl}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{ctl}",
            f"log.dirs={self.data}",
            *(f"{key}={value}" for key, value in SINGLE_NODE.items()),
        ]
        if self.transaction_max_timeout_ms is not None:
            lines.append(f"transaction.max.timeout.ms={self.transaction_max_timeout_ms}")
        props = self.state_dir / "server.properties"
        props.write_text("\n".join(lines) + "\n")
        log4j = self.state_dir / "log4j2.properties"
        log4j.write_text(
            "\n".join(
                [
                    "status = warn",
                    "appender.file.type = File",
                    "appender.file.name = file",
                    f"appender.file.fileName = {self.log_file}",
                    "appender.file.layout.type = PatternLayout",
                    "appender.file.layout.pattern = [%d] %p %m (%c)%n",
                    "rootLogger.level = INFO",
                    "rootLogger.appenderRef.file.ref = file",
                    "logger.kafka.name = kafka",
                    "logger.kafka.level = INFO",
                    "logger.controller.name = org.apache.kafka.controller",
                    "logger.controller.level = WARN",
                ]
            )
            + "\n"
        )
        return props

    def _java(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                "java",
                "-cp",
                f"{self.libs}/*",
                f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
                *args,
            ],
            capture_output=True,
            text=True,
            **kw,
        )

    def _format(self, props: Path) -> None:
        if (self.data / "meta.properties").is_file():
            return
        cluster_id = (
            self._java("kafka.tools.StorageTool", "random-uuid").stdout.strip().splitlines()[-1]
        )
        result = self._java(
            "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props), "--standalone"
        )
        if result.returncode != 0:
            raise BrokerError(f"formatting {self.data} failed: {result.stderr.strip()[-500:]}")

    # ------------------------------------------------------------------ lifecycle

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return pid if b"kafka.Kafka" in cmdline else None

    def ready(self, timeout: float = 2.0) -> bool:
        return broker_answers(self.bootstrap, timeout)

    def up(self, wait_s: float = 90.0) -> None:
        """Start the broker unless ours is running already; wait until metadata answers."""
        if self.pid() and self.ready():
            log.info(f"kafka    running at {self.bootstrap} (pid {self.pid()})")
            return
        if not self.pid():
            for port, role in ((self.port, "client"), (self.ctl_port, "controller")):
                if not port_free(port):
                    raise BrokerError(
                        f"the broker's {role} port {port} is taken by another process; stop it "
                        f"or set PIPELINES_KAFKA_PORT to a port P with P and P+1 free"
                    )
        self.ensure_libs()
        props = self._write_config()
        self._format(props)
        heap = os.environ.get("PIPELINES_KAFKA_HEAP", "-Xmx768m")
        with open(self.state_dir / "stdout.log", "ab") as out:
            proc = subprocess.Popen(
                [
                    "java",
                    heap,
                    "-XX:+UseG1GC",
                    "-cp",
                    f"{self.libs}/*",
                    f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
                    "kafka.Kafka",
                    str(props),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.state_dir,
            )
        self.pid_file.write_text(str(proc.pid))
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                cause = self.first_error()
                raise BrokerError(
                    f"the broker exited with code {proc.returncode}"
                    f"{': ' + cause if cause else ''}; last lines of "
                    f"{self.log_file}:\n{self.log_tail()}"
                )
            if self.ready(timeout=1.0):
                log.info(
                    f"kafka    started at {self.bootstrap} (pid {proc.pid}, log {self.log_file})"
                )
                return
            time.sleep(0.3)
        raise BrokerError(
            f"the broker did not answer within {wait_s:.0f}s; last lines of "
            f"{self.log_file}:\n{self.log_tail()}"
        )

    def down(self, kill: bool = False, wait_s: float = 60.0) -> None:
        pid = self.pid()
        if not pid:
            log.info("kafka    not running")
            return
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self.pid():
            time.sleep(0.2)
        if self.pid():
            os.kill(pid, signal.SIGKILL)
            while self.pid():
                time.sleep(0.1)
        _wait_port_free(self.port, 10)
        log.info(f"kafka    stopped (pid {pid})")

    def status(self) -> str:
        pid = self.pid()
        if not pid:
            return f"kafka    not running (expected at {self.bootstrap})"
        return (
            f"kafka    {'ready' if self.ready() else 'NOT answering'} at {self.bootstrap} "
            f"(pid {pid}, log {self.log_file})"
        )

    def transactions(self, args: list[str], bootstrap: str | None = None) -> int:
        """Kafka's own `kafka-transactions` tool (list, describe, find-hanging, abort)."""
        self.ensure_libs()
        cmd = [
            "java",
            "-cp",
            f"{self.libs}/*",
            f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
            "org.apache.kafka.tools.TransactionsCommand",
            "--bootstrap-server",
            bootstrap or self.bootstrap,
            *args,
        ]
        return subprocess.run(cmd).returncode

    def first_error(self) -> str:
        """The log's first ERROR line: the cause, which a stack trace's tail does not show."""
        if not self.log_file.is_file():
            return ""
        lines = self.log_file.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if " ERROR " in line or " FATAL " in line:
                error = line.split("] ", 1)[-1].removeprefix("ERROR ").removeprefix("FATAL ")
                following = lines[i + 1] if i + 1 < len(lines) else ""
                # The exception line under it ("o.a.k...KafkaException: Socket server failed to
                # bind to ...") says why; keep its message without the class name.
                if re.match(r"^[\w.$]+(Exception|Error): ", following):
                    error += " -- " + following.split(": ", 1)[1]
                return error.strip()[:400]
        return ""

    def log_tail(self, lines: int = 15) -> str:
        text = ""
        for path in (self.log_file, self.state_dir / "stdout.log"):
            if path.is_file():
                text += "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text.rstrip() or "(no log written)"


def broker_answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """Whether a broker at `bootstrap` answers a metadata request within `timeout`."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": 1000, "logger": quiet_logger()}
    )
    try:
        return bool(admin.list_topics(timeout=timeout).brokers)
    except Exception:  # noqa: BLE001 - not answering (yet)
        return False


def _wait_port_free(port: int, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not port_free(port):
        time.sleep(0.2)
