"""What the Beam pipeline needs besides Python: Beam's Java side (KafkaIO in an expansion
service and an external Java SDK worker) and the Prism runner, all set up from pinned
sources and run on 127.0.0.1 in process groups the caller owns.

- Java: jars/beam/pom.xml, resolved by mvn into .local/beam/libs; every jar is checked
  against jars/beam/sha256.txt (a changed or unexpected jar is an error naming it).
- Prism: `go install github.com/apache/beam/sdks/v2/go/cmd/prism@PRISM_VERSION` from the
  Go module proxy into .local/beam/bin (the Beam wheel ships none and would download one).
- One Java worker serves one job only (a second job fails with RejectedExecutionException
  and the Python side hangs), so every run starts its own pair and ends it.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.host.jars import sha256_of
from pipelines.host.loopback import preload_env
from pipelines.host.maven import copy_dependencies, is_resolved
from pipelines.host.paths import JARS_DIR, local_state
from pipelines.running.processes import ProcessGroups

log = logging.getLogger(__name__)

BEAM_VERSION = "2.61.0"
PRISM_VERSION = "v2.61.0"
PRISM_MODULE = "github.com/apache/beam/sdks/v2"
POM = JARS_DIR / "beam" / "pom.xml"
CHECKSUMS = JARS_DIR / "beam" / "sha256.txt"
LIBS = local_state("beam", "libs")
PRISM = local_state("beam", "bin", "prism")


class BeamSetupError(Exception):
    """Beam's Java side or Prism could not be set up or started; the message says why."""


def pinned_checksums() -> dict[str, str]:
    pins = {}
    for line in CHECKSUMS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, digest = line.split()
            pins[name] = digest
    return pins


def check_libs(libs: Path = LIBS) -> list[Path]:
    """The resolved jars, each matching its pinned sha256; BeamSetupError otherwise."""
    pins = pinned_checksums()
    found = {p.name: p for p in libs.glob("*.jar")}
    missing = sorted(set(pins) - set(found))
    extra = sorted(set(found) - set(pins))
    if missing or extra:
        raise BeamSetupError(
            f"{libs}: the jars differ from {CHECKSUMS.name} (missing: {', '.join(missing) or 'none'}; "
            f"not pinned: {', '.join(extra) or 'none'}): delete {libs} and run `pipelines beam setup`"
        )
    for name, path in sorted(found.items()):
        if sha256_of(path) != pins[name]:
            raise BeamSetupError(
                f"{path} does not match its pinned sha256 in {CHECKSUMS}: delete {libs} and run "
                f"`pipelines beam setup`"
            )
    return sorted(found.values())


def ensure_java(libs: Path = LIBS) -> list[Path]:
    """Resolve Beam's Java side with mvn (once per pom) and check every jar."""
    if not is_resolved(POM, libs):
        log.info(f"beam     resolving Beam {BEAM_VERSION}'s Java side with mvn into {libs}")
        problem = copy_dependencies(POM, libs)
        if problem:
            raise BeamSetupError(f"mvn could not resolve {POM}: {problem}")
    return check_libs(libs)


# Prism listens on every interface (its job server on `:port`, its FnAPI worker server on
# `:0`) and has no option to say otherwise; Go makes its own system calls, so the loopback
# shim cannot reach it. Built here from the module's source with these two lines changed
# (each must match exactly once, or the build stops and says the patch no longer applies).
PRISM_PATCHES = (
    (
        "go/pkg/beam/runners/prism/internal/jobservices/server.go",
        'net.Listen("tcp", fmt.Sprintf(":%d", port))',
        'net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))',
    ),
    (
        "go/pkg/beam/runners/prism/internal/worker/worker.go",
        'net.Listen("tcp", ":0")',
        'net.Listen("tcp", "127.0.0.1:0")',
    ),
)
PRISM_BUILD = f"{PRISM_VERSION}+loopback"


def _go() -> str:
    go = shutil.which("go") or next(
        (str(p) for p in (Path("/usr/local/go/bin/go"),) if p.is_file()), None
    )
    if go is None:
        raise BeamSetupError(
            "go is not on PATH: the Prism runner is built from the Go module proxy"
        )
    return go


def patch_prism_source(root: Path) -> None:
    """Apply PRISM_PATCHES under `root` (a copy of the module), each exactly once."""
    for relative, old, new in PRISM_PATCHES:
        path = root / relative
        text = path.read_text()
        if text.count(old) != 1:
            raise BeamSetupError(
                f"the Prism loopback patch no longer applies to {relative} at "
                f"{PRISM_VERSION} ({text.count(old)} matches of {old!r}); update PRISM_PATCHES"
            )
        path.write_text(text.replace(old, new))


def ensure_prism(binary: Path = PRISM) -> Path:
    """Build Prism from the Go module proxy at the pinned version, its listeners patched to
    loopback (once)."""
    marker = binary.with_suffix(".version")
    if binary.is_file() and marker.is_file() and marker.read_text() == PRISM_BUILD:
        return binary
    go = _go()
    log.info(f"beam     building Prism {PRISM_BUILD} with go (about a minute, once)")
    env = {**os.environ, "GOFLAGS": "-mod=mod"}

    def run(*args: str, cwd: Path | None = None) -> str:
        result = subprocess.run([go, *args], capture_output=True, text=True, env=env, cwd=cwd)
        if result.returncode != 0:
            tail = " | ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
            raise BeamSetupError(f"go could not build Prism {PRISM_BUILD}: {tail}")
        return result.stdout

    module = json.loads(run("mod", "download", "-json", f"{PRISM_MODULE}@{PRISM_VERSION}"))
    source = binary.parent.parent / "prism-src"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    for part in ("go", "go.mod", "go.sum"):  # not its java/, python/, typescript/
        origin = Path(module["Dir"]) / part
        if origin.is_dir():
            shutil.copytree(origin, source / part)
        else:
            shutil.copy(origin, source / part)
    for path in [source, *source.rglob("*")]:  # the module cache's files are read-only
        path.chmod(path.stat().st_mode | 0o200)
    patch_prism_source(source)
    binary.parent.mkdir(parents=True, exist_ok=True)
    run("build", "-o", str(binary), "./go/cmd/prism", cwd=source)
    shutil.rmtree(source, ignore_errors=True)
    marker.write_text(PRISM_BUILD)
    return binary


def free_port() -> int:
    """A port on 127.0.0.1 the kernel has just given out (pipelines_dev.ports is off
    limits here: the runtime never imports the developer tooling)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_listening(
    owner: ProcessGroups,
    what: str,
    command: list[str],
    port: int,
    log_path: Path,
    deadline_s: float,
    env: dict | None = None,
) -> subprocess.Popen:
    """Start `command` in a process group `owner` ends, its output to `log_path`, and
    return once it listens on `port` (BeamSetupError if it exits or does not in time)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as out:
        proc = owner.popen(
            command, env=preload_env(env or dict(os.environ)), stdout=out, stderr=subprocess.STDOUT
        )
    _wait_listening(port, proc, what, log_path, deadline_s)
    return proc


def _wait_listening(
    port: int, proc: subprocess.Popen, what: str, log_path: Path, deadline_s: float
) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BeamSetupError(
                f"{what} exited ({proc.returncode}) before it listened; see "
                f"{log_path}: {_tail(log_path)}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise BeamSetupError(
        f"{what} did not listen on 127.0.0.1:{port} within {deadline_s:.0f} s; see {log_path}"
    )


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class JavaServices:
    """An ExternalWorkerService and an ExpansionService that points transforms at it."""

    expansion_port: int
    worker_port: int
    processes: dict = field(default_factory=dict)  # what -> (Popen, its log)

    @property
    def expansion_address(self) -> str:
        return f"127.0.0.1:{self.expansion_port}"


def start_java_services(
    owner: ProcessGroups, libs: Path = LIBS, log_dir: Path | None = None, deadline_s: float = 90.0
) -> JavaServices:
    """Start both JVMs in process groups `owner` ends; return once both listen. Their JVM
    options come from JVM_ARGS, the variable Flink's scripts and PyFlink's gateway read."""
    log_dir = log_dir or local_state("logs")
    jvm_args = shlex.split(os.environ.get("JVM_ARGS", ""))
    classpath = f"{libs}/*"
    worker_port, expansion_port = free_port(), free_port()
    environment = f"127.0.0.1:{worker_port}"
    options = {"defaultEnvironmentType": "EXTERNAL", "defaultEnvironmentConfig": environment}
    worker_log = log_dir / "beam-java-worker.log"
    worker = start_listening(
        owner,
        "Beam's Java worker",
        [
            "java",
            *jvm_args,
            "-cp",
            classpath,
            "org.apache.beam.fn.harness.ExternalWorkerService",
            str(worker_port),
        ],
        worker_port,
        worker_log,
        deadline_s,
        env={**os.environ, "PIPELINE_OPTIONS": json.dumps({"options": options})},
    )
    expansion_log = log_dir / "beam-expansion-service.log"
    expansion = start_listening(
        owner,
        "Beam's expansion service",
        [
            "java",
            *jvm_args,
            "-cp",
            classpath,
            "org.apache.beam.sdk.expansion.service.ExpansionService",
            str(expansion_port),
            "--defaultEnvironmentType=EXTERNAL",
            f"--defaultEnvironmentConfig={environment}",
        ],
        expansion_port,
        expansion_log,
        deadline_s,
    )
    return JavaServices(
        expansion_port,
        worker_port,
        {"Java worker": (worker, worker_log), "expansion service": (expansion, expansion_log)},
    )


def dead_service(services: JavaServices, grace_s: float = 0.0) -> str | None:
    """A one-line reason if a Java service has exited (a pipeline would hang on it).

    `grace_s` is for a pipeline that has already failed: a killed process closes its
    sockets before the kernel reports it exited, so the runner can see the broken
    connection first. Waiting that long for an exit names the cause instead of only
    "FAILED"; a pipeline that failed for another reason pays it once."""
    deadline = time.monotonic() + grace_s
    while True:
        for what, (proc, log_path) in services.processes.items():
            if proc.poll() is not None:
                return (
                    f"Beam's {what} exited ({proc.returncode}) while the pipeline ran; see "
                    f"{log_path}: {_tail(log_path)}"
                )
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
