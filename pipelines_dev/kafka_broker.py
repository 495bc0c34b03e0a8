"""A real single-node Kafka 4.x broker (KRaft, combined mode) run from its Maven jars.

No Docker engine is assumed. The broker's runtime closure is resolved by `mvn` from
jars/broker/pom.xml into .local/kafka/libs; data, config and logs live beside it.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.host.maven import copy_dependencies, is_resolved
from pipelines.host.paths import PROJECT_ROOT, local_state
from pipelines.kafka.clients import quiet_logger
from pipelines.running.processes import PidFile, start_identity
from pipelines_dev.kafka_tls import TlsError, TlsFiles, ensure_tls, write_secret
from pipelines_dev.ports import port_free

log = logging.getLogger(__name__)

STATE_DIR = Path(os.environ.get("PIPELINES_KAFKA_DIR", local_state("kafka")))
POM = PROJECT_ROOT / "jars" / "broker" / "pom.xml"
# Kafka's command-line tools (storage format, kafka-transactions) run for a second or two:
# C2's compiles cost more CPU than they return there (StorageTool: 1.3 s of CPU -> 0.8 s).
TOOL_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)
DEFAULT_PORT = int(os.environ.get("PIPELINES_KAFKA_PORT", "9092"))


# A one-node cluster: without these, transactions and group commits hang. Shared with the
# container broker (pipelines_dev/containers.py), so both brokers the tests use behave alike.
SINGLE_NODE = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    # No time-based retention: tests and demos write records with fixed timestamps years in
    # the past, and the retention check (every 5 min) deleted them mid-test ("Offset out of
    # range" on read-back, 0 records in a rerun).
    "log.retention.ms": "-1",
}


SCRAM_USER = "pipelines"  # the user `kafka up --secure` creates
ADMIN_USER = "admin"  # the secure broker's own login: inter-broker, controller, set-up


class BrokerError(Exception):
    """The broker could not be set up or started; the message carries the log's last lines."""


@dataclass(frozen=True)
class Broker:
    state_dir: Path = STATE_DIR
    port: int = DEFAULT_PORT
    transaction_max_timeout_ms: int | None = None  # None: Kafka's default (900000)
    controller_port: int | None = None  # None: port + 1
    # A TLS listener on port + 2 and a SASL_SSL (SCRAM) one on port + 3, beside plaintext.
    secure: bool = False

    @property
    def ctl_port(self) -> int:
        """The KRaft controller listener; a second port the broker binds besides `port`."""
        return self.controller_port if self.controller_port is not None else self.port + 1

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.port + 2}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.port + 3}"

    @property
    def tls(self):
        return TlsFiles(self.state_dir / "tls")

    def user_password_file(self, user: str = SCRAM_USER) -> Path:
        return self.tls.dir / f"{user}.password"

    def admin_password(self) -> str:
        """The super user's password (made once, in a 0600 file): the broker's own
        listeners take only this login."""
        path = self.user_password_file(ADMIN_USER)
        if not path.is_file():
            write_secret(path, secrets.token_urlsafe(18))
        return path.read_text().strip()

    def _admin_jaas(self, serves: bool) -> str:
        """The admin's PLAIN JAAS line: a client's login, or (`serves`) the broker's own
        listeners, which also list the one user they accept."""
        password = self.admin_password()
        accepts = f' user_{ADMIN_USER}="{password}"' if serves else ""
        return (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN_USER}" password="{password}"{accepts};'
        )

    def admin_conf(self) -> dict[str, str]:
        """librdkafka settings that reach this broker as its admin: on a secure broker, the
        PLAIN login on the inter-broker listener; otherwise plaintext."""
        if not self.runs_secure():
            return {"bootstrap.servers": self.bootstrap}
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": ADMIN_USER,
            "sasl.password": self.admin_password(),
        }

    def ports(self) -> list[tuple[int, str]]:
        named = [(self.port, "client"), (self.ctl_port, "controller")]
        if self.secure:
            named += [(self.port + 2, "TLS"), (self.port + 3, "SASL_SSL")]
        return named

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
        if is_resolved(POM, self.libs):
            return
        log.info(f"resolving the Kafka broker's jars with mvn into {self.libs}")
        problem = copy_dependencies(POM, self.libs)
        if problem:
            raise BrokerError(f"mvn could not resolve the broker from {POM}: {problem}")

    def _write_config(self) -> Path:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)  # its data is records; its config, store passwords
        ctl = self.ctl_port
        if self.secure:
            # No unauthenticated path to data: the broker's own listeners (inter-broker on
            # `port`, the controller) take only the admin's PLAIN login, TLS and SASL_SSL
            # clients meet the authorizer, and only the admin is a super user.
            listeners = [
                f"INTERNAL://127.0.0.1:{self.port}",
                f"SSL://{self.ssl_bootstrap}",
                f"SASL_SSL://{self.sasl_ssl_bootstrap}",
            ]
            inter_broker = "INTERNAL"
            protocols = (
                "INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL"
            )
        else:
            listeners = [f"PLAINTEXT://127.0.0.1:{self.port}"]
            inter_broker = "PLAINTEXT"
            protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        lines = [
            "process.roles=broker,controller",
            "node.id=1",
            f"listeners={','.join(listeners)},CONTROLLER://127.0.0.1:{ctl}",
            f"advertised.listeners={','.join(listeners)}",
            "controller.listener.names=CONTROLLER",
            f"inter.broker.listener.name={inter_broker}",
            f"listener.security.protocol.map={protocols}",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{ctl}",
            f"log.dirs={self.data}",
            *(f"{key}={value}" for key, value in SINGLE_NODE.items()),
        ]
        if self.transaction_max_timeout_ms is not None:
            lines.append(f"transaction.max.timeout.ms={self.transaction_max_timeout_ms}")
        if self.secure:
            tls = self.tls
            plain = self._admin_jaas(serves=True)
            scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            lines += [
                f"ssl.keystore.location={tls.broker_keystore}",
                "ssl.keystore.type=PKCS12",
                f"ssl.keystore.password={tls.store_password()}",
                f"ssl.key.password={tls.store_password()}",
                "ssl.client.auth=none",
                "sasl.mechanism.inter.broker.protocol=PLAIN",
                "sasl.mechanism.controller.protocol=PLAIN",
                "listener.name.internal.sasl.enabled.mechanisms=PLAIN",
                f"listener.name.internal.plain.sasl.jaas.config={plain}",
                "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
                f"listener.name.controller.plain.sasl.jaas.config={plain}",
                "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512",
                f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram}",
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                f"super.users=User:{ADMIN_USER}",
                "allow.everyone.if.no.acl.found=false",
            ]
        props = self.state_dir / "server.properties"
        props.touch(mode=0o600)
        props.chmod(0o600)  # keystore and truststore passwords
        props.write_text("\n".join(lines) + "\n")
        self._write_log4j()
        return props

    def _write_log4j(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
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

    def _tool(self, *args: str) -> list[str]:
        """The command line of one of Kafka's tools: its main class and arguments in `args`."""
        return [
            "java",
            *TOOL_JVM_OPTIONS,
            "-cp",
            f"{self.libs}/*",
            f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
            *args,
        ]

    def _java(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self._tool(*args), capture_output=True, text=True, **kw)

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
        """The broker this checkout started, if it still runs (never another process that
        took its pid since)."""
        return PidFile(self.pid_file, "kafka.Kafka", "kafka   ").live()

    def ready(self, timeout: float = 2.0) -> bool:
        return broker_answers(self.admin_conf(), timeout)

    def up(self, wait_s: float = 90.0) -> None:
        """Start the broker unless ours is running already; wait until metadata answers."""
        if self.pid() and self.ready() and (not self.secure or self.runs_secure()):
            log.info(f"kafka    running at {self.bootstrap} (pid {self.pid()})")
            if self.secure:
                self._ensure_default_user()
            return
        if self.pid() and self.secure and not self.runs_secure():
            raise BrokerError(
                f"the broker at {self.bootstrap} runs without --secure: stop it first "
                f"(`pipelines-dev kafka down`)"
            )
        if not self.pid():
            free = "P..P+3" if self.secure else "P and P+1"
            for port, role in self.ports():
                if not port_free(port):
                    raise BrokerError(
                        f"the broker's {role} port {port} is taken by another process; stop it "
                        f"or set PIPELINES_KAFKA_PORT to a port P with {free} free"
                    )
        self.ensure_libs()
        if self.secure:
            try:
                ensure_tls(self.tls.dir)
            except TlsError as exc:
                raise BrokerError(f"TLS set-up in {self.tls.dir}: {exc}") from None
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
        PidFile(self.pid_file, "kafka.Kafka", "kafka   ").write(proc.pid)
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
                if self.secure:
                    self._ensure_default_user()
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
        started = start_identity(pid)
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and start_identity(pid) == started:
            time.sleep(0.2)
        if start_identity(pid) == started:
            os.kill(pid, signal.SIGKILL)
            while start_identity(pid) == started:
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)
        _wait_port_free(self.port, 10)
        log.info(f"kafka    stopped (pid {pid})")

    def runs_secure(self) -> bool:
        props = self.state_dir / "server.properties"
        return props.is_file() and "SASL_SSL://" in props.read_text()

    def _ensure_default_user(self) -> None:
        path = self.user_password_file()
        if not path.is_file():
            write_secret(path, secrets.token_urlsafe(18))
        self.add_scram_user(SCRAM_USER, path.read_text().strip())
        log.info(self.secure_summary())

    def add_scram_user(self, user: str, password: str) -> None:
        """Create or update a SCRAM-SHA-512 user and grant it what the jobs and the CLI need,
        through the Admin API as the broker's admin: no password on any command line."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({**self.admin_conf(), "logger": quiet_logger()})
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password.encode()
        )
        try:
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(timeout=60)
            for future in admin.create_acls(user_acls(user)).values():
                future.result(timeout=60)
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout: one line
            raise BrokerError(
                f"could not set up user {user!r} on {self.bootstrap}: {exc}"
            ) from None

    def secure_summary(self) -> str:
        tls = self.tls
        return "\n".join(
            [
                f"kafka    TLS at {self.ssl_bootstrap}, SASL_SSL (SCRAM-SHA-512) at "
                f"{self.sasl_ssl_bootstrap}; a job's config for it:",
                "  kafka:",
                f"    bootstrap_servers: {self.sasl_ssl_bootstrap}",
                "    security:",
                "      protocol: SASL_SSL",
                "      sasl_mechanism: SCRAM-SHA-512",
                f"      username: {SCRAM_USER}",
                f"      password: ${{file:{self.user_password_file()}}}",
                f"      ssl_truststore_location: {tls.truststore_p12}   # or .jks, or {tls.ca_pem.name}",
                f"      ssl_truststore_password: ${{file:{tls.store_password_file}}}",
            ]
        )

    def status(self) -> str:
        pid = self.pid()
        if not pid:
            return f"kafka    not running (expected at {self.bootstrap})"
        return (
            f"kafka    {'ready' if self.ready() else 'NOT answering'} at {self.bootstrap} "
            f"(pid {pid}, log {self.log_file})"
        )

    def transactions(
        self,
        args: list[str],
        bootstrap: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> int:
        """Kafka's own `kafka-transactions` tool (list, describe, find-hanging, abort).
        `properties` (TLS, SASL) go in a --command-config file only this user can read,
        removed when the tool ends."""
        import tempfile

        self.ensure_libs()
        if not (self.state_dir / "log4j2.properties").is_file():
            self._write_log4j()
        cmd = self._tool(
            "org.apache.kafka.tools.TransactionsCommand",
            "--bootstrap-server",
            bootstrap or self.bootstrap,
        )
        if properties is None and bootstrap in (None, self.bootstrap) and self.runs_secure():
            properties = {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": self._admin_jaas(serves=False),
            }
        with tempfile.TemporaryDirectory(prefix="pipelines-kafka-") as private:
            if properties:
                config = Path(private) / "client.properties"
                config.write_text(
                    "".join(f"{k}={_escape_property(v)}\n" for k, v in properties.items())
                )
                cmd += ["--command-config", str(config)]
            return subprocess.run([*cmd, *args]).returncode

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


def _escape_property(value: str) -> str:
    """A value as java.util.Properties reads it back (backslashes, line breaks)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def user_acls(user: str) -> list:
    """What the jobs and the CLI need, for `user`: read and write topics (and create them:
    the demo and the tests do), read groups, transactional ids, idempotent writes. docs/security.md
    lists the narrower set a team grants on its own cluster."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    wanted = {
        ResourceType.TOPIC: ("*", ["READ", "WRITE", "DESCRIBE", "CREATE", "DESCRIBE_CONFIGS"]),
        ResourceType.GROUP: ("*", ["READ", "DESCRIBE"]),
        ResourceType.TRANSACTIONAL_ID: ("*", ["WRITE", "DESCRIBE"]),
        ResourceType.BROKER: ("kafka-cluster", ["IDEMPOTENT_WRITE", "DESCRIBE"]),
    }
    return [
        AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL,
            f"User:{user}",
            "*",
            getattr(AclOperation, op),
            AclPermissionType.ALLOW,
        )
        for kind, (name, ops) in wanted.items()
        for op in ops
    ]


def broker_answers(bootstrap: str | dict, timeout: float = 2.0) -> bool:
    """Whether a broker at `bootstrap` (an address, or a librdkafka config) answers a
    metadata request within `timeout`."""
    from confluent_kafka.admin import AdminClient

    conf = bootstrap if isinstance(bootstrap, dict) else {"bootstrap.servers": bootstrap}
    admin = AdminClient({**conf, "socket.timeout.ms": 1000, "logger": quiet_logger()})
    try:
        return bool(admin.list_topics(timeout=timeout).brokers)
    except Exception:  # noqa: BLE001 - not answering (yet)
        return False


def _wait_port_free(port: int, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not port_free(port):
        time.sleep(0.2)


@dataclass(frozen=True)
class ListedTransaction:
    """One row of `kafka-transactions list` (`Broker.transactions(["list"])`)."""

    transactional_id: str
    coordinator: int  # the broker id whose transaction log partition holds it
    producer_id: int
    state: str  # Ongoing, CompleteCommit, CompleteAbort, Empty, ...


def listed_transactions(output: str) -> list[ListedTransaction]:
    """The rows of `kafka-transactions list` output: its header and any line that is not a
    row (a warning the tool printed) are skipped."""
    rows = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[1].isdigit() and parts[2].lstrip("-").isdigit():
            rows.append(ListedTransaction(parts[0], int(parts[1]), int(parts[2]), parts[3]))
    return rows
