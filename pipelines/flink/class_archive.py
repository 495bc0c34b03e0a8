"""The gateway JVM's class archive: the classes a local run's JVM loads (the mini-cluster,
the job's operators, the Python runner) saved once as a class-data-sharing archive, which
the JVM then maps instead of loading and verifying each class again (JDK 13+ dynamic
archives: `-XX:ArchiveClassesAtExit` writes one as a JVM exits, `-XX:SharedArchiveFile`
uses it). A cold gateway spends most of its first second and a half there.

One archive per JDK and class path, named by a hash of both (`archive_path`), in
.local/class-archive; `pipelines jars` builds it (pipelines.warm_start). A gateway started
by gateway_in_group uses it when it exists; without one it starts as before, and where the
archive does not match the JVM after all, the JVM says so in its log and loads the
classes itself (`-Xshare:auto`, its default). `PIPELINES_CLASS_ARCHIVE=0` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from pipelines.host.paths import local_state

OFF_ENV = "PIPELINES_CLASS_ARCHIVE"  # "0": no archive used or written
# Set by the archive's builder only: the directory its gateway JVM writes the archive into.
DUMP_ENV = "PIPELINES_CLASS_ARCHIVE_DUMP"
PREFIX = "gateway-"


def archive_dir() -> Path:
    """Where the archives are (not created: a gateway only looks)."""
    return local_state("class-archive")


def _stamp(path: str | Path) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}:missing"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def archive_path(command: list[str]) -> Path:
    """Where the archive for the JVM and class path of `command` (a `java ... -cp CP ...`
    command line) is kept: the JDK (its `java` and `libjvm.so`, resolved) and every class
    path entry (size and modification time) are in its name."""
    java = os.path.realpath(shutil.which(command[0]) or command[0])
    jdk = Path(java).parent.parent
    parts = [_stamp(java), _stamp(jdk / "lib" / "server" / "libjvm.so")]
    classpath = command[command.index("-cp") + 1]
    parts += [_stamp(entry) for entry in classpath.split(os.pathsep)]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    return archive_dir() / f"{PREFIX}{key}.jsa"


def with_class_archive(command: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    """The gateway command with its class archive: used where it exists, written on exit
    where the builder asks for it (DUMP_ENV), unchanged otherwise."""
    if "-cp" not in command or environ.get(OFF_ENV) == "0":
        return command
    path = archive_path(command)
    dump = environ.get(DUMP_ENV)
    if dump:
        option = f"-XX:ArchiveClassesAtExit={Path(dump) / path.name}"
    elif path.is_file():
        option = f"-XX:SharedArchiveFile={path}"
    else:
        return command
    return [command[0], option, *command[1:]]
