"""The jars a job needs on Flink's classpath, pinned by checksum, resolved in one place.

A wrong or missing connector jar is the most common way a PyFlink Kafka job dies with a
Py4J stack trace (`TypeError: 'JavaPackage' object is not callable`). Every job resolves
its jars here first, so the failure is one line that says what to run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipelines.host.loopback import ShimError, build_shim
from pipelines.host.paths import JARS_DIR, PROJECT_ROOT

log = logging.getLogger(__name__)

MANIFEST = JARS_DIR / "manifest.txt"
LIB_DIR = Path(os.environ.get("PIPELINES_JAR_LIB", JARS_DIR / "lib"))
SRC_DIR = JARS_DIR / "src"
BUILD_DIR = JARS_DIR / "build"
PROJECT_JAR = LIB_DIR / "pipelines-flink.jar"
MVN_TIMEOUT_S = 600.0  # one jar from Maven Central; a hung mvn is an error, not a hang


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(PROJECT_ROOT))
    except ValueError:
        return str(path)


class JarError(Exception):
    """A jar is missing, corrupt or stale. The message says which and what to run."""


@dataclass(frozen=True)
class PinnedJar:
    coordinates: str
    sha256: str

    @property
    def path(self) -> Path:
        _group, artifact, version = self.coordinates.split(":")
        return LIB_DIR / f"{artifact}-{version}.jar"


def read_manifest(path: Path = MANIFEST) -> list[PinnedJar]:
    jars = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or parts[0].count(":") != 2 or len(parts[1]) != 64:
            raise JarError(f"{path}:{number}: expected 'group:artifact:version sha256'")
        jars.append(PinnedJar(parts[0], parts[1].lower()))
    return jars


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check(jar: PinnedJar) -> str | None:
    return _pin_problem(jar.path, jar.coordinates, jar.sha256, "make jars")


def _pin_problem(path: Path, coordinates: str, sha256: str, target: str) -> str | None:
    rel = _shown(path)
    if not path.is_file():
        return f"missing jar {rel} ({coordinates}): run `{target}`"
    actual = sha256_of(path)
    if actual != sha256:
        return (
            f"jar {rel} does not match its pinned sha256 ({actual[:12]}... != "
            f"{sha256[:12]}...): delete it and run `{target}`"
        )
    return None


def _project_jar_problem() -> str | None:
    sources = list(SRC_DIR.rglob("*.java"))
    if not sources:
        return None
    rel = _shown(PROJECT_JAR)
    if not PROJECT_JAR.is_file():
        return f"missing jar {rel} (built from jars/src): run `make jars`"
    built = PROJECT_JAR.stat().st_mtime
    if any(src.stat().st_mtime > built for src in sources):
        return f"jar {rel} is older than jars/src: run `make jars` to rebuild it"
    return None


def resolve() -> list[Path]:
    """The jars for `pipeline.jars`, checked; raises JarError with one readable line."""
    pinned = read_manifest()
    problems = [p for p in (_check(j) for j in pinned) if p]
    project = _project_jar_problem()
    if project:
        problems.append(project)
    if problems:
        raise JarError("; ".join(problems))
    paths = [j.path for j in pinned]
    if list(SRC_DIR.rglob("*.java")):
        paths.append(PROJECT_JAR)
    return paths


def flink_dist_jar() -> Path:
    import pyflink

    lib = Path(pyflink.__file__).parent / "lib"
    found = sorted(lib.glob("flink-dist-*.jar"))
    if not found:
        raise JarError(f"no flink-dist jar under {lib}: is apache-flink installed?")
    return found[0]


def fetch_pinned(coordinates: str, path: Path, sha256: str, target: str) -> None:
    """`coordinates` into `path` with mvn unless it is there with its pinned `sha256`, and
    checked after. JarError says what went wrong; `target` is the make target to run again."""
    if path.is_file() and sha256_of(path) == sha256:
        return
    if shutil.which("mvn") is None:
        raise JarError(
            f"mvn is not on PATH: install Maven (apt-get install maven) and run `{target}`"
        )
    log.info(f"fetching {coordinates}")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={coordinates}",
             f"-DoutputDirectory={path.parent}", "-Dmdep.overWriteReleases=true"],
            capture_output=True, text=True, timeout=MVN_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise JarError(
            f"mvn did not fetch {coordinates} within {MVN_TIMEOUT_S:.0f} s: is Maven Central "
            f"reachable? then run `{target}`"
        ) from None
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        raise JarError(f"mvn could not fetch {coordinates}: {' | '.join(tail)}")
    problem = _pin_problem(path, coordinates, sha256, target)
    if problem:
        raise JarError(problem)


def fetch() -> list[Path]:
    """Fetch every pinned jar with mvn, verify it, and build the project's own jar."""
    LIB_DIR.mkdir(parents=True, exist_ok=True)
    for jar in read_manifest():
        fetch_pinned(jar.coordinates, jar.path, jar.sha256, "make jars")
        log.info(f"ok       {jar.coordinates}")
    build_project_jar()
    try:
        build_shim()
    except ShimError as exc:
        raise JarError(str(exc)) from None
    return resolve()


def build_project_jar() -> None:
    sources = sorted(SRC_DIR.rglob("*.java"))
    if not sources or _project_jar_problem() is None:
        if sources:
            log.info(f"ok       {_shown(PROJECT_JAR)}")
        return
    if shutil.which("javac") is None or shutil.which("jar") is None:
        raise JarError("javac/jar not on PATH: install a JDK (17) to build jars/src")
    classes = BUILD_DIR / "classes"
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    classpath = ":".join(str(p) for p in [flink_dist_jar(), *(j.path for j in read_manifest())])
    compiled = subprocess.run(
        [
            "javac",
            "--release",
            "11",
            "-nowarn",
            "-cp",
            classpath,
            "-d",
            str(classes),
            *map(str, sources),
        ],
        capture_output=True,
        text=True,
    )
    if compiled.returncode != 0:
        raise JarError(f"javac failed on jars/src: {compiled.stderr.strip()}")
    subprocess.run(["jar", "cf", str(PROJECT_JAR), "-C", str(classes), "."], check=True)
    log.info(f"built    {_shown(PROJECT_JAR)}")
