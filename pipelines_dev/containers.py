"""Images built on this machine and the containers the tests run from them.

No registry is assumed: the base image is Debian bookworm from `debootstrap` (the mirror read
from apt's own sources at run time) with Java 17 and Python 3.11, imported with `docker
import`; the Kafka image adds the broker jars `make kafka-up` resolves (deploy/kafka/); the
deploy image is deploy/Dockerfile over `pipelines package` output and wheels built here.
Each image carries a label with the hash of its inputs and is rebuilt only when they change.
A user with a registry swaps any of them with one variable (PIPELINES_BASE_IMAGE,
PIPELINES_KAFKA_IMAGE).

Everything started here is labelled with this checkout's path, so `make clean` (`pipelines
docker down`) removes what a killed test run left, and nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.host.paths import PROJECT_ROOT, local_state
from pipelines.running import registry
from pipelines.settings import load_settings
from pipelines.shipping.packaging import package_job, shippable
from pipelines_dev.kafka_broker import SINGLE_NODE, Broker, broker_answers

log = logging.getLogger(__name__)

OWNER_LABEL = "org.pipelines.checkout"
INPUTS_LABEL = "org.pipelines.inputs"
STATE = local_state("images")

SUITE = "bookworm"
# Java 17 for Kafka and Flink, Python 3.11 (bookworm's python3) with venv for the jobs.
# libpython3.11: thread mode's pemja loads the shared libpython into the JVM; without it
# (python3 alone links it statically) a thread-mode stage cannot start in these images.
BASE_PACKAGES = ("openjdk-17-jre-headless", "python3", "python3-venv", "libpython3.11")
DEFAULT_BASE = "pipelines-base:bookworm-java17-py311"
DEFAULT_KAFKA = "pipelines-kafka:4.2.0"
# The reference deploy/kubernetes/enrich.yaml names; the container test runs this tag.
DEPLOY_IMAGE = "registry.example.com/pipelines-enrich:0.1.0"
KAFKA_CONTEXT = PROJECT_ROOT / "deploy" / "kafka"
DEPLOY_DOCKERFILE = PROJECT_ROOT / "deploy" / "Dockerfile"


class DockerError(Exception):
    """An image could not be built or a container not started; the message says which and why."""


# ------------------------------------------------------------------ the engine


def docker_problem(timeout: float = 15.0) -> str | None:
    """None when a Docker engine answers, else why not (one line)."""
    if shutil.which("docker") is None:
        return "no `docker` command on PATH"
    try:
        result = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"the Docker engine did not answer `docker info` within {timeout:.0f}s"
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        return "no Docker engine answers: " + (lines[-1] if lines else f"exit {result.returncode}")
    return None


def docker(*args: str, check: bool = True, timeout: float = 600, **kw) -> str:
    try:
        result = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, **kw
        )
    except subprocess.TimeoutExpired as exc:
        raise DockerError(
            f"`docker {' '.join(args[:3])}` did not end within {timeout:.0f}s"
        ) from exc
    if check and result.returncode != 0:
        raise DockerError(f"`docker {' '.join(args[:3])}` failed: {_last_lines(result.stderr)}")
    return result.stdout.strip()


def remove_containers(ids: list[str], timeout: float = 120) -> None:
    """`docker rm -f -v` each of `ids`, all at once: one `docker rm` of many removes them
    one after another (about a second each here), and the topology's nine, with a test
    broker or two, outlasted the 10 s `.ci/run` gives its clean-up after a stop."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(len(ids), 12) or 1) as pool:
        list(pool.map(lambda c: docker("rm", "-f", "-v", c, check=False, timeout=timeout), ids))


def _last_lines(text: str, count: int = 5) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-count:])


def image_inputs(image: str) -> str | None:
    """The inputs hash an image of ours was built from; None when there is no such image."""
    result = subprocess.run(
        [
            "docker",
            "image",
            "inspect",
            "--format",
            f'{{{{index .Config.Labels "{INPUTS_LABEL}"}}}}',
            image,
        ],
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def image_exists(image: str) -> bool:
    return image_inputs(image) is not None


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:16]


def _files_digest(paths) -> list[str]:
    return [f"{p.name}:{hashlib.sha256(p.read_bytes()).hexdigest()}" for p in sorted(paths)]


# ------------------------------------------------------------------ the base image


def debian_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt uses on this machine (deb822 .sources or sources.list), so no
    mirror or registry host is written into the repository."""
    candidates = sorted((sources / "sources.list.d").glob("*.sources")) if sources.is_dir() else []
    for path in candidates:
        for stanza in path.read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1)
                for line in stanza.splitlines()
                if ":" in line and not line.startswith("#")
            )
            suites = fields.get("Suites", "").split()
            if SUITE in suites and "deb" in fields.get("Types", "").split():
                return fields["URIs"].split()[0].strip()
    listing = sources / "sources.list"
    if listing.is_file():
        for line in listing.read_text().splitlines():
            match = re.match(rf"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+{SUITE}\s", line)
            if match:
                return match.group(1)
    raise DockerError(
        f"no Debian {SUITE} mirror in {sources}/sources.list(.d); debootstrap needs one "
        f"(or set PIPELINES_BASE_IMAGE to an image with Java 17 and Python 3.11)"
    )


def base_image() -> str:
    return os.environ.get("PIPELINES_BASE_IMAGE", DEFAULT_BASE)


def ensure_base() -> str:
    """The base image: Java 17 and Python 3.11 on Debian bookworm, from debootstrap."""
    image = base_image()
    inputs = _digest(SUITE, *BASE_PACKAGES)
    if image != DEFAULT_BASE:
        if not image_exists(image):
            raise DockerError(f"PIPELINES_BASE_IMAGE={image}: no such image on this engine")
        return image
    if image_inputs(image) == inputs:
        return image
    if shutil.which("debootstrap") is None:
        raise DockerError(
            "building the base image needs debootstrap (apt-get install debootstrap), or set "
            "PIPELINES_BASE_IMAGE to an image with Java 17 and Python 3.11"
        )
    mirror = debian_mirror()
    started = time.monotonic()
    STATE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=STATE, prefix="rootfs-") as root:
        log.info(f"docker   building {image}: debootstrap {SUITE} from {mirror}")
        result = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                SUITE,
                root,
                mirror,
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise DockerError(f"debootstrap failed: {_last_lines(result.stdout + result.stderr)}")
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        before = _image_id(image)
        docker(
            "import",
            "--change",
            f"LABEL {INPUTS_LABEL}={inputs}",
            "--change",
            "ENV LANG=C.UTF-8",
            "-",
            image,
            stdin=tar.stdout,
        )
        tar.wait()
        _drop_replaced(before, image)
    log.info(f"docker   built {image} in {time.monotonic() - started:.0f}s")
    return image


# ------------------------------------------------------------------ the Kafka image


def kafka_image() -> str:
    return os.environ.get("PIPELINES_KAFKA_IMAGE", DEFAULT_KAFKA)


def ensure_kafka_image() -> str:
    """The broker image from the project's broker jars; another PIPELINES_KAFKA_IMAGE (e.g.
    apache/kafka:4.2.0 where a registry answers) is used as it is."""
    image = kafka_image()
    if image != DEFAULT_KAFKA:
        return image

    broker = Broker()
    broker.ensure_libs()
    base = ensure_base()
    libs = sorted(broker.libs.glob("*.jar"))
    files = [KAFKA_CONTEXT / n for n in ("Dockerfile", "kafka-start.sh", "log4j2.properties")]
    inputs = _digest(
        docker("image", "inspect", "--format", "{{.Id}}", base),
        *_files_digest(files),
        *(f"{p.name}:{p.stat().st_size}" for p in libs),
    )
    if image_inputs(image) == inputs:
        return image
    started = time.monotonic()
    with build_context("kafka-context") as context:
        (context / "libs").mkdir(parents=True)
        for path in files:
            shutil.copy2(path, context / path.name)
        for jar in libs:
            _link_or_copy(jar, context / "libs" / jar.name)
        build_image(context, image, base, labels={INPUTS_LABEL: inputs})
    log.info(f"docker   built {image} in {time.monotonic() - started:.0f}s")
    return image


@contextlib.contextmanager
def build_context(name: str) -> Iterator[Path]:
    """A build context of this build's own under .local/images, removed whatever happens:
    one fixed directory was shared by two builds at once (two test workers, two terminals)
    and left behind by a failed build."""
    STATE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(
        dir=STATE, prefix=f"{name}-", ignore_cleanup_errors=True
    ) as tmp:
        yield Path(tmp)


def build_image(
    context: Path,
    tag: str,
    base: str,
    dockerfile: Path | None = None,
    args: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> None:
    """`docker build` of `context` (made readable first) over `base`, quiet; a failed
    build leaves no stopped container behind."""
    shippable(context)  # built under umask 077: see packaging.shippable
    options = ["-f", str(dockerfile)] if dockerfile else []
    for key, value in {"BASE": base, **(args or {})}.items():
        options += ["--build-arg", f"{key}={value}"]
    for key, value in (labels or {}).items():
        options += ["--label", f"{key}={value}"]
    before = _image_id(tag)
    docker("build", "-q", "--force-rm", *options, "-t", tag, str(context), timeout=1800)
    _drop_replaced(before, tag)


def _image_id(tag: str) -> str | None:
    found = docker("image", "inspect", "--format", "{{.Id}}", tag, check=False).strip()
    return found if found.startswith("sha256:") else None


def _drop_replaced(before: str | None, tag: str) -> None:
    """Remove the image a rebuild took the tag from: every rebuild (new inputs, another
    checkout's labels) left a 1.9 GB untagged image behind, 20 of them on the CI machine in a
    day. One still in use by a container, or by another tag, stays (docker refuses)."""
    if before is not None and before != _image_id(tag):
        docker("image", "rm", before, check=False)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (what random-uuid prints).
    Never one starting with `-`: kafka-storage's `--cluster-id -x...` takes it for an option
    and the broker container exits (a random id starts with it 1 time in 64)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


# ------------------------------------------------------------------ the deploy image


def runtime_requirements() -> list[str]:
    """The project's runtime dependencies as pyproject.toml states them."""
    import tomllib

    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def ensure_wheels() -> Path:
    """Wheels of the runtime dependencies, at the versions this venv runs, for images whose
    build cannot reach the package index. Kept in .local/images/wheels between runs."""
    out = STATE / "wheels"
    requirements = runtime_requirements()
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    inputs = _digest(*requirements, frozen)
    stamp = out / ".inputs"
    if stamp.is_file() and stamp.read_text() == inputs:
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / "constraints.txt").write_text(frozen)
    (out / "requirements.txt").write_text("\n".join(requirements) + "\n")
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "-w",
            str(out),
            "-r",
            str(out / "requirements.txt"),
            "-c",
            str(out / "constraints.txt"),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise DockerError(f"pip wheel failed: {_last_lines(result.stderr)}")
    stamp.write_text(inputs)
    log.info(f"docker   wheels for the image in {out} ({time.monotonic() - started:.0f}s)")
    return out


def build_deploy_image(
    package_root: Path, job: str, tag: str = DEPLOY_IMAGE, base: str | None = None
) -> str:
    """deploy/Dockerfile over a `pipelines package` directory and the host's wheels. Docker's
    layer cache makes a rebuild with the same package and wheels take seconds."""
    base = base or ensure_base()
    wheels = ensure_wheels()
    started = time.monotonic()
    with build_context("deploy-context") as context:
        (context / "dist").mkdir(parents=True)
        shutil.copytree(package_root, context / "dist" / job)
        (context / "dist" / "wheels").mkdir()
        for path in wheels.iterdir():
            if path.name != ".inputs":
                _link_or_copy(path, context / "dist" / "wheels" / path.name)
        build_image(
            context,
            tag,
            base,
            dockerfile=DEPLOY_DOCKERFILE,
            args={"JOB": job},
            labels={OWNER_LABEL: str(PROJECT_ROOT)},
        )
    log.info(f"docker   built {tag} from {base} in {time.monotonic() - started:.0f}s")
    return tag


# How the image runs a job: the same python, module and source root the Kubernetes
# manifest's PythonDriver arguments name (-pyclientexec, --pyModule, --pyFiles), checked by
# tests/unit/test_deploy.py; the container test runs exactly this.
DEPLOY_PYTHON = "/opt/venv/bin/python"
DEPLOY_ROOT = "/opt/pipelines"


def deploy_command(job: str) -> list[str]:
    return [DEPLOY_PYTHON, "-m", f"pipelines.jobs.{job}"]


def build_enrich_deploy_image(tag: str = DEPLOY_IMAGE, base: str | None = None) -> str:
    """`pipelines package enrich` for the image's python, then the deploy image over it."""
    sections = registry.load("enrich").sections
    loaded = load_settings("enrich", environ={}, local=False, sections=sections)  # no conf/local
    with build_context("package-enrich") as root:
        package = package_job(loaded, root, python=DEPLOY_PYTHON, flink="flink")
        return build_deploy_image(package.root, "enrich", tag=tag, base=base)


# ------------------------------------------------------------------ containers


def owner_labels() -> dict[str, str]:
    return {OWNER_LABEL: str(PROJECT_ROOT)}


def remove_owned() -> list[str]:
    """Remove every container and network this checkout started (`make clean`)."""
    removed: list[str] = []
    label = f"label={OWNER_LABEL}={PROJECT_ROOT}"
    if docker_problem(timeout=5):
        return removed
    containers = docker("ps", "-aq", "--filter", label, check=False).split()
    if containers:
        remove_containers(containers)
        removed += [f"container {c}" for c in containers]
    networks = docker("network", "ls", "-q", "--filter", label, check=False).split()
    for net in networks:
        docker("network", "rm", net, check=False)
        removed.append(f"network {net}")
    return removed


@dataclass
class ContainerBroker:
    """A single-node KRaft broker in a container, started through testcontainers.

    Two listeners: HOST on 127.0.0.1:`port` (published with the same number inside and out,
    so the advertised address works from both sides) and NET as `kafka:9094` on the tests'
    bridge network, for jobs that run in containers of their own.
    """

    port: int
    network_name: str = field(default_factory=lambda: f"pipelines-test-{uuid.uuid4().hex[:8]}")
    alias: str = "kafka"
    network_port: int = 9094
    image: str = field(default_factory=kafka_image)
    _container: object = None
    _network: object = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def network_bootstrap(self) -> str:
        return f"{self.alias}:{self.network_port}"

    def environment(self) -> dict[str, str]:
        env = {
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_LISTENERS": f"HOST://0.0.0.0:{self.port},NET://0.0.0.0:{self.network_port},"
            "CONTROLLER://127.0.0.1:9093",
            "KAFKA_ADVERTISED_LISTENERS": f"HOST://127.0.0.1:{self.port},NET://{self.network_bootstrap}",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "HOST:PLAINTEXT,NET:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "KAFKA_INTER_BROKER_LISTENER_NAME": "HOST",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9093",
            "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
            "KAFKA_HEAP_OPTS": os.environ.get("PIPELINES_KAFKA_HEAP", "-Xmx768m"),
            "CLUSTER_ID": cluster_id(),
        }
        for key, value in SINGLE_NODE.items():
            env["KAFKA_" + key.upper().replace(".", "_")] = value
        return env

    def start(self, wait_s: float = 120.0) -> None:
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.network import Network

        self._network = Network(docker_network_kw={"labels": owner_labels()})
        self._network.name = self.network_name
        self._network.create()
        container = DockerContainer(self.image)
        for key, value in self.environment().items():
            container.with_env(key, value)
        # Published on 127.0.0.1 only (with_bind_ports binds every address): docker-py's
        # (ip, port) form, which testcontainers hands through as it is.
        container.ports = {f"{self.port}/tcp": ("127.0.0.1", self.port)}  # type: ignore[dict-item]
        container.with_network(self._network)
        container.with_network_aliases(self.alias)
        container.with_name(self.name)
        container.with_kwargs(labels=owner_labels())
        self._container = container
        # A start that fails, times out or is interrupted (Ctrl-C while the broker comes up)
        # leaves no container or network: the caller has nothing to remove yet.
        try:
            try:
                container.start()
            except Exception as exc:  # docker-py's APIError: say which image and why
                first = str(exc).splitlines()[0]
                raise DockerError(f"starting {self.image} failed: {first}") from exc
            self.wait_ready(wait_s)
        except BaseException:
            self.remove()
            raise

    @property
    def name(self) -> str:
        return f"{self.network_name}-kafka"

    def ready(self, timeout: float = 2.0) -> bool:
        return broker_answers(self.bootstrap, timeout)

    def running(self) -> bool:
        return docker("inspect", "--format", "{{.State.Running}}", self.name, check=False) == "true"

    def wait_ready(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.ready(timeout=1.0):
                log.info(f"kafka    container {self.name} ({self.image}) at {self.bootstrap}")
                return
            if not self.running():
                raise DockerError(f"the broker container exited: {_last_lines(self.logs(), 8)}")
            time.sleep(0.3)
        raise DockerError(
            f"the broker container did not answer within {wait_s:.0f}s: {_last_lines(self.logs(), 8)}"
        )

    def logs(self) -> str:
        result = subprocess.run(
            ["docker", "logs", "--tail", "40", self.name], capture_output=True, text=True
        )
        return result.stdout + result.stderr

    def stop_broker(self, timeout_s: int = 60) -> None:
        """`docker stop`: SIGTERM to the broker, its data kept for `start_broker`."""
        docker("stop", "-t", str(timeout_s), self.name, timeout=timeout_s + 30)

    def start_broker(self, wait_s: float = 120.0) -> None:
        docker("start", self.name)
        self.wait_ready(wait_s)

    def remove(self) -> None:
        docker("rm", "-f", "-v", self.name, check=False)
        if self._network is not None:
            docker("network", "rm", self.network_name, check=False)
