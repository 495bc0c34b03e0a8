"""The production-shaped cluster on one machine (`pipelines-dev topology up|down|status`).

Containers on a bridge network the project creates, each in its own network namespace,
from images built here (no registry answers on the machines this is made for):

    kafka-1..3     Kafka 4.2 in KRaft mode, each broker also a controller (3 voters):
                   replication 3, min.insync.replicas 2, the transaction log 3 / min ISR 2
    zookeeper      ZooKeeper 3.9 for Flink's high availability
    seaweedfs      SeaweedFS (master, volume, filer and its S3 gateway in one process):
                   checkpoints, savepoints and HA metadata, bucket `flink`
    jobmanager     Flink 2.2.1 (the PyFlink wheel's distribution) with ZooKeeper HA
    taskmanager-1..2   2 slots each, Python 3.11 and this project installed
    enrichment     the demo enrichment service

What the host and the jobs both use (the brokers, the enrichment service) is published on
the network's gateway address: an address of this bridge, reachable from the host and from
every container as the same host:port, so one job config works for `pipelines doctor` on
the host and for the TaskManagers. What only the host uses (Flink's REST API, the S3
gateway for checks) is published on 127.0.0.1. Nothing binds the host's other interfaces.

The object store's credentials are generated at the first `up` into .local/topology/secrets
(0600, git-ignored) and reach the containers as read-only mounted files, never as
environment variables, command-line arguments or image layers.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from pipelines.flink.environment import PROMETHEUS_REPORTER
from pipelines.flink.jobmanager import JobManager, JobManagerError
from pipelines.host.maven import copy_dependencies
from pipelines.host.paths import PROJECT_ROOT, local_state
from pipelines.lookups.http_demo import DemoService
from pipelines_dev import containers
from pipelines_dev.containers import (
    INPUTS_LABEL,
    OWNER_LABEL,
    STATE,
    DockerError,
    _digest,
    _files_digest,
    _last_lines,
    _link_or_copy,
    docker,
    image_inputs,
    remove_containers,
)
from pipelines_dev.flink_cluster import rest_overview
from pipelines_dev.kafka_tls import write_secret
from pipelines_dev.ports import free_ports
from pipelines_dev.s3 import S3, S3Error

log = logging.getLogger(__name__)

DEPLOY = PROJECT_ROOT / "deploy"
ZOOKEEPER_IMAGE = "pipelines-zookeeper:3.9.5"
SEAWEEDFS_IMAGE = "pipelines-seaweedfs:4.53"
FLINK_IMAGE = "pipelines-flink:2.2.1-py311"
# weed 4.53: the seaweedfs module's newest version the Go module proxy serves here (a
# pseudo-version: the module publishes no tags the proxy lists).
SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
S3_PLUGIN = "flink-s3-fs-hadoop-2.2.0.jar"
PROMETHEUS_PLUGIN = "flink-metrics-prometheus-2.2.1.jar"  # the wheel's plugins/metrics-prometheus
PLUGINS = f"{S3_PLUGIN};{PROMETHEUS_PLUGIN}"
REPORTER_PORT = 9249
BUCKET = "flink"
TOPOLOGY_LABEL = "org.pipelines.topology"
FLINK_HOME = "/opt/venv/lib/python3.11/site-packages/pyflink"
TASKMANAGERS = 2
SLOTS = 2
BROKERS = 3
# Docker's restart policy for the JobManager and TaskManagers: as a pod's, unbounded, with
# Docker's growing back-off between attempts.
FLINK_RESTART = "on-failure"

# Broker settings of a replicated cluster: an acknowledged record survives the loss of any
# one broker (acks=all waits for 2 of 3 replicas), and so does a committed transaction.
REPLICATED = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "unclean.leader.election.enable": "false",
    "num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "log.retention.ms": "-1",  # old-timestamp demo records are not deleted at once
    "transaction.max.timeout.ms": "3600000",
    "auto.create.topics.enable": "false",
}


# ------------------------------------------------------------------ images


def _build_image(image: str, dockerfile: Path, context_files: dict[str, Path], inputs: str) -> str:
    """`docker build` of `dockerfile` over a context of `context_files` (name in context ->
    file or directory), labelled with `inputs`; skipped when an image of those inputs exists."""
    if image_inputs(image) == inputs:
        return image
    started = time.monotonic()
    with containers.build_context("context") as context:
        for name, src in context_files.items():
            dst = context / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                dst.mkdir()
                for item in src.iterdir():
                    _link_or_copy(item, dst / item.name)
            else:
                _link_or_copy(src, dst)
        containers.build_image(
            context,
            image,
            containers.ensure_base(),
            dockerfile=dockerfile,
            labels={INPUTS_LABEL: inputs},
        )
    log.info(f"docker   built {image} in {time.monotonic() - started:.0f}s")
    return image


def _jars(pom_dir: str) -> Path:
    """The runtime closure of jars/<pom_dir>/pom.xml, copied once into .local/images."""
    out = STATE / f"jars-{pom_dir}"
    problem = copy_dependencies(PROJECT_ROOT / "jars" / pom_dir / "pom.xml", out)
    if problem:
        raise DockerError(f"jars/{pom_dir}/pom.xml: {problem}")
    return out


def _base_id() -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", containers.ensure_base())


def ensure_zookeeper_image() -> str:
    libs = _jars("zookeeper")
    files = [DEPLOY / "zookeeper" / n for n in ("zookeeper-start.sh", "log4j2.properties")]
    inputs = _digest(
        _base_id(),
        *_files_digest([DEPLOY / "zookeeper" / "Dockerfile", *files]),
        *sorted(p.name for p in libs.glob("*.jar")),
    )
    return _build_image(
        ZOOKEEPER_IMAGE,
        DEPLOY / "zookeeper" / "Dockerfile",
        {"libs": libs, **{f.name: f for f in files}},
        inputs,
    )


def ensure_weed() -> Path:
    """SeaweedFS's `weed`, built from the Go module proxy at SEAWEEDFS_VERSION (static, so
    it runs on the base image's libc). Kept in .local/images; Go's own module and build
    caches make a rebuild after `make clean` a relink."""
    out = STATE / "seaweedfs" / f"weed-{SEAWEEDFS_VERSION}"
    if out.is_file():
        return out
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None
    )
    if go is None:
        raise DockerError("building SeaweedFS needs Go (https://go.dev/dl, or PATH)")
    started = time.monotonic()
    found = subprocess.run(
        [go, "mod", "download", "-json", f"{SEAWEEDFS_MODULE}@{SEAWEEDFS_VERSION}"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise DockerError(
            f"go mod download {SEAWEEDFS_MODULE}: {_last_lines(found.stdout + found.stderr)}"
        )
    source = Path(json.loads(found.stdout)["Dir"])
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix="src-") as tmp:
        # The module's go.mod has replace directives, which `go install pkg@version`
        # refuses: build it as the main module, from a writable copy.
        src = Path(tmp) / "seaweedfs"
        shutil.copytree(source, src)
        for path in (src, *src.rglob("*")):
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o200)
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -mod=mod"}
        built = subprocess.run(
            [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out) + ".tmp", "./weed"],
            cwd=src,
            env=env,
            capture_output=True,
            text=True,
        )
    if built.returncode != 0:
        raise DockerError(f"go build weed: {_last_lines(built.stdout + built.stderr)}")
    os.replace(str(out) + ".tmp", out)
    log.info(f"docker   built weed {SEAWEEDFS_VERSION} in {time.monotonic() - started:.0f}s")
    return out


def ensure_seaweedfs_image() -> str:
    weed = ensure_weed()
    start = DEPLOY / "seaweedfs" / "seaweedfs-start.sh"
    inputs = _digest(
        _base_id(),
        *_files_digest([DEPLOY / "seaweedfs" / "Dockerfile", start]),
        SEAWEEDFS_VERSION,
    )
    return _build_image(
        SEAWEEDFS_IMAGE,
        DEPLOY / "seaweedfs" / "Dockerfile",
        {"weed": weed, start.name: start},
        inputs,
    )


WHEEL_PACKAGES = ("pipelines", "pipelines_dev")


def project_wheel() -> Path:
    """This checkout as a wheel (no dependencies), for the TaskManagers' venv."""
    out = STATE / "project-wheel"
    # The runtime and, for the demo enrichment service the topology runs from the same
    # image (deploy/flink/flink-start.sh), the developer tooling.
    sources = sorted(
        p
        for package in WHEEL_PACKAGES
        for p in (PROJECT_ROOT / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    inputs = _digest(
        *_files_digest([PROJECT_ROOT / "pyproject.toml"]),
        *(f"{p.relative_to(PROJECT_ROOT)}:{_digest(p.read_bytes())}" for p in sources),
    )
    stamp = out / ".inputs"
    if stamp.is_file() and stamp.read_text() == inputs:
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=STATE, prefix="project-") as tmp:
        # A copy of the tracked sources only: the build never sees .local or the venv.
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(PROJECT_ROOT / name, Path(tmp) / name)
        for package in WHEEL_PACKAGES:
            shutil.copytree(
                PROJECT_ROOT / package,
                Path(tmp) / package,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), tmp],
            capture_output=True,
            text=True,
        )
    if result.returncode != 0:
        raise DockerError(f"pip wheel (this project): {_last_lines(result.stderr)}")
    stamp.write_text(inputs)
    return out


def ensure_flink_image() -> str:
    wheels = containers.ensure_wheels()
    project = project_wheel()
    plugin = _jars("flink-s3") / S3_PLUGIN
    start = DEPLOY / "flink" / "flink-start.sh"
    inputs = _digest(
        _base_id(),
        *_files_digest([DEPLOY / "flink" / "Dockerfile", start]),
        (wheels / ".inputs").read_text(),
        (project / ".inputs").read_text(),
        S3_PLUGIN,
    )
    return _build_image(
        FLINK_IMAGE,
        DEPLOY / "flink" / "Dockerfile",
        {
            "wheels": wheels,
            "project": project,
            f"plugins/{S3_PLUGIN}": plugin,
            start.name: start,
        },
        inputs,
    )


def ensure_images() -> dict[str, str]:
    return {
        "kafka": containers.ensure_kafka_image(),
        "zookeeper": ensure_zookeeper_image(),
        "seaweedfs": ensure_seaweedfs_image(),
        "flink": ensure_flink_image(),
    }


# ------------------------------------------------------------------ the topology


class TopologyError(Exception):
    """The topology could not be started or is not healthy; the message says why."""


def _yaml_lines(entries: dict[str, object]) -> str:
    return "".join(f"{k}: {v}\n" for k, v in entries.items())


@dataclass
class Topology:
    """One topology per checkout (its containers are named and labelled after `name`)."""

    name: str = field(
        default_factory=lambda: os.environ.get("PIPELINES_TOPOLOGY", "pipelines-topology")
    )
    state_dir: Path = field(default_factory=lambda: local_state("topology"))

    # ---------------------------------------------------------------- what it is

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def secrets_dir(self) -> Path:
        return self.state_dir / "secrets"

    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def container(self, role: str) -> str:
        return f"{self.name}-{role}"

    def roles(self) -> list[str]:
        return [
            "zookeeper",
            "seaweedfs",
            *(f"kafka-{i}" for i in range(1, BROKERS + 1)),
            "enrichment",
            "jobmanager",
            *(f"taskmanager-{i}" for i in range(1, TASKMANAGERS + 1)),
        ]

    @property
    def bootstrap(self) -> str:
        s = self.state()
        return ",".join(f"{s['gateway']}:{p}" for p in s["kafka_ports"])

    @property
    def jobmanager(self) -> str:
        return f"127.0.0.1:{self.state()['rest_port']}"

    @property
    def enrichment_url(self) -> str:
        s = self.state()
        return f"http://{s['gateway']}:{s['enrichment_port']}"

    def s3(self):
        keys = json.loads((self.secrets_dir / "s3-keys.json").read_text())
        return S3(f"http://127.0.0.1:{self.state()['s3_port']}", keys["access"], keys["secret"])

    def job_sets(self, job: str) -> list[str]:
        """The settings that point `job` at this topology (each a `--set KEY=VALUE`); the
        demo service's address only for a job that declares its section."""
        demo = [f"demo_service.url={self.enrichment_url}"] if _declares_demo(job) else []
        return [
            f"kafka.bootstrap_servers={self.bootstrap}",
            *demo,
            f"checkpoint.storage=s3://{BUCKET}/checkpoints/{job}",
            f"checkpoint.savepoints=s3://{BUCKET}/savepoints/{job}",
        ]

    # ---------------------------------------------------------------- secrets

    def _secrets(self) -> dict[str, str]:
        """The object store's credentials (generated once), and the files that carry them
        into the containers: SeaweedFS's identity config and Flink's s3.* keys."""
        self.secrets_dir.mkdir(parents=True, exist_ok=True)
        self.secrets_dir.chmod(0o700)
        keys_file = self.secrets_dir / "s3-keys.json"
        if not keys_file.is_file():
            keys = {"access": "flink-" + secrets.token_hex(6), "secret": secrets.token_urlsafe(30)}
            write_secret(keys_file, json.dumps(keys))
        keys = json.loads(keys_file.read_text())
        identities = {
            "identities": [
                {
                    "name": "flink",
                    "credentials": [{"accessKey": keys["access"], "secretKey": keys["secret"]}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        write_secret(self.secrets_dir / "s3.json", json.dumps(identities))
        write_secret(
            self.secrets_dir / "flink-s3.yaml",
            _yaml_lines({"s3.access-key": keys["access"], "s3.secret-key": keys["secret"]}),
        )
        return keys

    # ---------------------------------------------------------------- up / down

    def _labels(self) -> list[str]:
        return [
            "--label", f"{OWNER_LABEL}={PROJECT_ROOT}",
            "--label", f"{TOPOLOGY_LABEL}={self.name}",
        ]  # fmt: skip

    def _run(
        self,
        role: str,
        image: str,
        *args: str,
        publish: Sequence[str] = (),
        env=None,
        mounts=(),
        restart: str = "no",
    ):
        cmd = [
            "run", "-d", "--name", self.container(role), "--hostname", role,
            "--network", self.name, "--network-alias", role, *self._labels(),
            "--restart", restart,
        ]  # fmt: skip
        for port in publish:
            cmd += ["-p", port]
        for key, value in (env or {}).items():
            cmd += ["-e", f"{key}={value}"]
        for src, dst in mounts:
            cmd += ["-v", f"{src}:{dst}:ro"]
        docker(*cmd, image, *args)

    def flink_properties(self, role: str) -> str:
        common = {
            "jobmanager.rpc.address": "jobmanager",
            "jobmanager.bind-host": "0.0.0.0",
            "rest.address": "jobmanager",
            "rest.bind-address": "0.0.0.0",
            "rest.port": 8081,
            "blob.server.port": 6124,
            "high-availability.type": "zookeeper",
            "high-availability.zookeeper.quorum": "zookeeper:2181",
            "high-availability.cluster-id": "/topology",
            "high-availability.storageDir": f"s3://{BUCKET}/ha",
            "s3.endpoint": "http://seaweedfs:8333",
            "s3.endpoint.region": "us-east-1",
            "s3.path.style.access": "true",
            "execution.checkpointing.dir": f"s3://{BUCKET}/checkpoints",
            "execution.checkpointing.savepoint-dir": f"s3://{BUCKET}/savepoints",
            "python.executable": "/opt/venv/bin/python",
            "jobmanager.memory.process.size": "1024m",
            "taskmanager.memory.process.size": "1600m",
            "taskmanager.numberOfTaskSlots": SLOTS,
            "taskmanager.bind-host": "0.0.0.0",
            # Every Flink container serves /metrics on 9249 of the topology's network only
            # (not published): a Prometheus there scrapes jobmanager:9249, taskmanager-N:9249.
            "metrics.reporter.prom.factory.class": PROMETHEUS_REPORTER,
            "metrics.reporter.prom.port": REPORTER_PORT,
            # No fixed RPC port: a TaskManager killed and started again at the same
            # host:port is a new actor system at an address the JobManager still holds an
            # association to, and Pekko discards its registration ("read-only
            # association") until the TaskManager gives up after 5 minutes. An ephemeral
            # port makes every incarnation a new address, as a new pod IP does.
        }
        if role.startswith("taskmanager"):
            common["taskmanager.host"] = role
        return _yaml_lines(common)

    def up(self, wait_s: float = 300.0) -> dict:
        """Start every container (reusing a healthy topology), then wait until it is
        healthy: every broker in the ISR of a test topic, 2 TaskManagers with 4 free slots
        on the JobManager, ZooKeeper and the object store answering."""
        if self.state() and self.healthy(timeout_s=5):
            return self.state()
        self.down()
        started = time.monotonic()
        images = ensure_images()
        built = time.monotonic() - started
        keys = self._secrets()

        docker("network", "create", *self._labels(), self.name)
        gateway = docker(
            "network", "inspect", "--format", "{{(index .IPAM.Config 0).Gateway}}", self.name
        )
        state = {
            "name": self.name,
            "gateway": gateway,
            "kafka_ports": [free_ports() for _ in range(BROKERS)],
            "rest_port": free_ports(),
            "s3_port": free_ports(),
            "enrichment_port": free_ports(),
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(state, indent=2))
        t0 = time.monotonic()
        try:
            self._start_all(images, state)
            self._wait_healthy(keys, wait_s)
        except BaseException:
            kept = self.keep_logs()
            self.down()
            log.error(f"topology {self.name}: not started; every container's log is in {kept}")
            raise
        state["started_s"] = round(time.monotonic() - t0, 1)
        state["images_s"] = round(built, 1)
        self.state_file.write_text(json.dumps(state, indent=2))
        return state

    def _start_all(self, images: dict[str, str], state: dict) -> None:
        gw = state["gateway"]
        self._run("zookeeper", images["zookeeper"], env={"ZK_HEAP_OPTS": "-Xmx192m"})
        self._run(
            "seaweedfs",
            images["seaweedfs"],
            publish=[f"127.0.0.1:{state['s3_port']}:8333"],
            mounts=[(self.secrets_dir / "s3.json", "/run/secrets/s3.json")],
        )
        voters = ",".join(f"{i}@kafka-{i}:9093" for i in range(1, BROKERS + 1))
        cluster_id = containers.cluster_id()
        for i, port in enumerate(state["kafka_ports"], start=1):
            env = {
                "KAFKA_NODE_ID": str(i),
                "KAFKA_PROCESS_ROLES": "broker,controller",
                "KAFKA_LISTENERS": "CLIENT://0.0.0.0:9092,INTERNAL://0.0.0.0:9094,"
                "CONTROLLER://0.0.0.0:9093",
                "KAFKA_ADVERTISED_LISTENERS": f"CLIENT://{gw}:{port},INTERNAL://kafka-{i}:9094",
                "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,"
                "CONTROLLER:PLAINTEXT",
                "KAFKA_INTER_BROKER_LISTENER_NAME": "INTERNAL",
                "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
                "KAFKA_CONTROLLER_QUORUM_VOTERS": voters,
                "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
                "KAFKA_HEAP_OPTS": "-Xmx512m",
                "CLUSTER_ID": cluster_id,
            }
            for key, value in REPLICATED.items():
                env["KAFKA_" + key.upper().replace(".", "_")] = value
            self._run(f"kafka-{i}", images["kafka"], publish=[f"{gw}:{port}:9092"], env=env)
        self._run(
            "enrichment",
            images["flink"],
            "service",
            publish=[f"{gw}:{state['enrichment_port']}:8080"],
        )
        flink_secret = [(self.secrets_dir / "flink-s3.yaml", "/run/secrets/flink-s3.yaml")]
        # A Flink process ends itself on a fatal error and counts on its deployment to start
        # it again (a Kubernetes pod, a YARN container): a TaskManager whose Kafka sink
        # cannot abort a fenced transaction exits ("exception in exception handler of
        # task", see docs/exactly-once.md). Without a restart policy the job then restarts
        # for ever without slots. A fault's `docker kill` or `docker stop` is a manual stop,
        # which Docker never undoes; only an exit of the process's own is restarted.
        self._run(
            "jobmanager",
            images["flink"],
            "jobmanager",
            publish=[f"127.0.0.1:{state['rest_port']}:8081"],
            env={
                "FLINK_PROPERTIES": self.flink_properties("jobmanager"),
                "ENABLE_BUILT_IN_PLUGINS": PLUGINS,
            },
            mounts=flink_secret,
            restart=FLINK_RESTART,
        )
        for i in range(1, TASKMANAGERS + 1):
            role = f"taskmanager-{i}"
            self._run(
                role,
                images["flink"],
                "taskmanager",
                env={
                    "FLINK_PROPERTIES": self.flink_properties(role),
                    "ENABLE_BUILT_IN_PLUGINS": PLUGINS,
                },
                mounts=flink_secret,
                restart=FLINK_RESTART,
            )

    # ---------------------------------------------------------------- health

    def _exec(self, role: str, script: str, timeout: float = 10) -> str:
        return docker(
            "exec", self.container(role), "bash", "-c", script, check=False, timeout=timeout
        )

    def zookeeper_answers(self) -> bool:
        script = "exec 3<>/dev/tcp/127.0.0.1/2181 && echo ruok >&3 && head -c 4 <&3"
        return self._exec("zookeeper", script) == "imok"

    def store_answers(self) -> bool:
        try:
            self.s3().keys(BUCKET, "no-such-prefix/")
            return True
        except (S3Error, OSError):
            return False

    def jobmanager_overview(self) -> dict | None:
        return rest_overview(f"http://{self.jobmanager}", timeout=3)

    def taskmanager_ids(self) -> list[str] | None:
        """The resource ids of the registered TaskManagers (`taskmanager-1:PORT-xxxxxx`);
        None while no JobManager answers. A TaskManager lost without a goodbye stays
        listed until its heartbeat times out."""
        try:
            found = JobManager(self.jobmanager)._call("/taskmanagers")
        except (JobManagerError, OSError):
            return None
        return sorted(tm["id"] for tm in found.get("taskmanagers", []))

    def wait_ready(self, timeout_s: float = 180) -> list[str]:
        """Wait until nothing is wrong (every slot free again after a job ended, brokers in
        sync); the problems still seen at the deadline, or [] when ready."""
        deadline = time.monotonic() + timeout_s
        while True:
            problems = self._problems_seen()
            if not problems or time.monotonic() > deadline:
                return problems
            time.sleep(2)

    def brokers_in_sync(self, timeout_s: float = 5) -> str | None:
        """None when all brokers are in the ISR of every partition of the health topic;
        else what is missing."""
        from confluent_kafka.admin import AdminClient, NewTopic

        # librdkafka's own log (a refused connection while a broker starts) stays quiet.
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 3000},
            logger=LIBRDKAFKA_QUIET,
        )
        try:
            meta = admin.list_topics(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - KafkaException: not up yet
            return f"brokers: {exc}"
        if len(meta.brokers) < BROKERS:
            return f"brokers: {len(meta.brokers)} of {BROKERS} registered"
        topic = "__topology-health"
        if topic not in meta.topics:
            futures = admin.create_topics(
                [NewTopic(topic, num_partitions=BROKERS, replication_factor=BROKERS)],
                request_timeout=timeout_s,
            )
            for future in futures.values():
                try:
                    future.result(timeout=timeout_s)
                except Exception as exc:  # noqa: BLE001 - exists already, or not yet possible
                    if "already exists" not in str(exc):
                        return f"health topic: {exc}"
            return "health topic created"
        partitions = meta.topics[topic].partitions.values()
        short = [p.id for p in partitions if len(p.isrs) < BROKERS]
        return f"partitions {short} of {topic} not in sync on {BROKERS} brokers" if short else None

    def problems(self, timeout_s: float = 5) -> list[str]:
        out = []
        if not self.zookeeper_answers():
            out.append("zookeeper: no answer to ruok")
        if not self.store_answers():
            out.append(f"seaweedfs: the S3 gateway does not list bucket {BUCKET}")
        brokers = self.brokers_in_sync(timeout_s)
        if brokers:
            out.append(brokers)
        info = self.jobmanager_overview()
        if not info:
            out.append(f"jobmanager: no answer at {self.jobmanager}")
        elif (
            info.get("taskmanagers") != TASKMANAGERS
            or info.get("slots-available") != TASKMANAGERS * SLOTS
        ):
            out.append(
                f"jobmanager: {info.get('taskmanagers')} TaskManagers, "
                f"{info.get('slots-available')} free slots (want {TASKMANAGERS}, {TASKMANAGERS * SLOTS})"
            )
        if not _http_ok(f"{self.enrichment_url}/health"):
            out.append(f"enrichment: no answer at {self.enrichment_url}")
        return out

    def _problems_seen(self, timeout_s: float = 5) -> list[str]:
        """problems(), with a topology too broken to ask (no state, no engine) as one."""
        try:
            return self.problems(timeout_s)
        except (KeyError, OSError, DockerError) as exc:
            return [f"{type(exc).__name__}: {exc}"]

    def healthy(self, timeout_s: float = 5) -> bool:
        return not self._problems_seen(timeout_s)

    def _wait_healthy(self, keys: dict, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        bucket = False
        problems = ["not checked yet"]
        while time.monotonic() < deadline:
            for role in self.roles():
                if not self.running(role):
                    raise TopologyError(f"{role} exited: {_last_lines(self.logs(role), 8)}")
            if not bucket:
                try:
                    self.s3().create_bucket(BUCKET)
                    bucket = True
                except S3Error:
                    pass  # the gateway is still starting
            problems = self.problems()
            if not problems:
                return
            time.sleep(1)
        raise TopologyError(
            f"the topology was not healthy within {wait_s:.0f}s: {'; '.join(problems)}"
        )

    def restart_counts(self) -> dict[str, int]:
        """How often Docker's restart policy has started each container again after its
        process exited by itself (a fault's kill and start are not counted)."""
        names = [self.container(r) for r in self.roles()]
        out = docker(
            "inspect", "--format", "{{.Name}} {{.RestartCount}}", *names, check=False
        )  # fmt: skip
        counts = {}
        for line in out.splitlines():
            name, _, count = line.strip().lstrip("/").rpartition(" ")
            if count.isdigit():
                counts[name.removeprefix(self.name + "-")] = int(count)
        return counts

    def running(self, role: str) -> bool:
        state = docker(
            "inspect", "--format", "{{.State.Running}}", self.container(role), check=False
        )
        return state == "true"

    def logs(self, role: str, lines: int = 40) -> str:
        result = subprocess.run(
            ["docker", "logs", "--tail", str(lines), self.container(role)],
            capture_output=True,
            text=True,
        )
        return result.stdout + result.stderr

    def keep_logs(self, out: Path | None = None) -> Path:
        """Every container's whole log, into `out` (by default the state directory's logs/),
        before the containers are removed."""
        out = out or self.state_dir / "logs"
        out.mkdir(parents=True, exist_ok=True)
        for role in self.roles():
            (out / f"{role}.log").write_text(self.logs(role, lines=100_000))
        return out

    def summary(self) -> str:
        s = self.state()
        return (
            f"kafka {self.bootstrap}; flink http://{self.jobmanager} ({TASKMANAGERS} TaskManagers, "
            f"{TASKMANAGERS * SLOTS} slots, ZooKeeper HA); s3 http://127.0.0.1:{s['s3_port']} "
            f"bucket {BUCKET}; enrichment {self.enrichment_url}"
        )

    def metrics(self, role: str) -> str:
        """What a Flink container's Prometheus reporter serves, fetched from inside the
        topology's network (the reporter port is not published)."""
        fetch = (
            "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("
            f"'http://{role}:{REPORTER_PORT}/metrics', timeout=10).read().decode())"
        )
        return self._exec("jobmanager", f'/opt/venv/bin/python -c "{fetch}"', timeout=30)

    def memory(self) -> dict[str, int]:
        """Resident memory (bytes) of each container, from the kernel's cgroup accounting."""
        out = docker(
            "stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}",
            *(self.container(r) for r in self.roles()),
        )  # fmt: skip
        usage = {}
        for line in out.splitlines():
            name, used = line.split(" ", 1)
            usage[name.removeprefix(self.name + "-")] = _bytes(used.split("/")[0].strip())
        return usage

    def down(self) -> list[str]:
        """Remove every container of this topology (and their volumes) and its network."""
        removed = []
        label = f"label={TOPOLOGY_LABEL}={self.name}"
        ids = docker("ps", "-aq", "--filter", label, check=False).split()
        if ids:
            remove_containers(ids)
            removed += [f"{len(ids)} containers"]
        for net in docker("network", "ls", "-q", "--filter", label, check=False).split():
            docker("network", "rm", net, check=False)
            removed.append(f"network {self.name}")
        self.state_file.unlink(missing_ok=True)
        return removed


LIBRDKAFKA_QUIET = logging.getLogger("pipelines.topology.librdkafka")
LIBRDKAFKA_QUIET.addHandler(logging.NullHandler())
LIBRDKAFKA_QUIET.propagate = False


def _http_ok(url: str, timeout: float = 3) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except OSError:
        return False


def _bytes(text: str) -> int:
    units = {
        "B": 1,
        "KiB": 1024,
        "MiB": 1024**2,
        "GiB": 1024**3,
        "kB": 1000,
        "MB": 10**6,
        "GB": 10**9,
    }
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * units[unit])
    return int(float(text))


def _declares_demo(job: str) -> bool:
    """Whether `job` declares the demo service's section (`demo_service:`)."""
    from pipelines.running import registry  # lazy: loading a job imports PyFlink

    return DemoService in registry.load(job).sections
