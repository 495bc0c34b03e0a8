"""The gateway JVM's class archive (pipelines.flink.class_archive), built where it is
missing: `pipelines jars` ends here, so every set-up command leaves one behind.

A process of its own (`python -m pipelines.warm_start`) runs each job's logic once in
pipelines.testing, on a gateway JVM told to archive the classes it loaded as it exits,
then has that JVM exit and waits for it. The archive is kept only when the JVM wrote it
whole; otherwise one line says so and local runs start without it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipelines.flink.class_archive import DUMP_ENV, OFF_ENV, PREFIX, archive_dir, archive_path
from pipelines.flink.gateway import disconnect_gateway, gateway_command, gateway_in_group
from pipelines.host.paths import private_dir
from pipelines.running.processes import ProcessGroups, until_ended

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 600.0  # the jobs' runs and the archive written, on a slow machine
EXIT_TIMEOUT_S = 120.0  # the JVM's exit, the archive written on the way
SAMPLES: list[dict | bytes] = [  # fields of every shipped job's records, and one that is not JSON
    {"id": 1, "key": "a", "ts": 1_000, "company": "Acme"},
    {"id": 2, "key": "b", "ts": 70_000, "company": "Initech"},
    b"{not json",
]


def ensure_class_archive() -> Path | None:
    """The archive for this machine's JDK and gateway class path: the one there, or one
    built now (tens of seconds, once); None where it could not be built."""
    if os.environ.get(OFF_ENV) == "0":
        return None
    path = archive_path(gateway_command())
    if path.is_file():
        return path
    for stale in archive_dir().glob(f"{PREFIX}*.jsa"):  # another JDK or class path
        stale.unlink(missing_ok=True)
    log.info("class archive: building it for this JDK and class path (once)")
    dump = Path(tempfile.mkdtemp(prefix="building-", dir=private_dir(archive_dir())))
    owner = ProcessGroups()
    try:
        proc = owner.popen(
            [sys.executable, "-m", "pipelines.warm_start"],
            env={**os.environ, DUMP_ENV: str(dump)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, err = proc.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            err, proc.returncode = f"no result within {BUILD_TIMEOUT_S:.0f} s", -1
        built = dump / path.name
        if proc.returncode == 0 and built.is_file() and built.stat().st_size > 0:
            os.replace(built, path)
            log.info(f"class archive: {path}")
            return path
        why = (err or "").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        log.info(f"warning: class archive not built ({why[0]}); local runs start without it")
        return None
    finally:
        owner.end()
        shutil.rmtree(dump, ignore_errors=True)


def _no_lookup(settings):
    return _NoLookup()


class _NoLookup:
    """Every enrichment stage's client while the jobs run for the archive: no service."""

    async def lookup(self, record: dict) -> dict:
        return {}

    async def close(self) -> None:
        pass


def _exercise() -> int:
    """Run each job once, then have the JVM exit (archiving its classes) and wait for it.
    A job that cannot run here (settings it needs from the environment) is passed over."""
    # lazy: the jobs and PyFlink, in this process only (the CLI imports this module)
    from pipelines import testing
    from pipelines.running import registry

    owner = ProcessGroups()
    try:
        with gateway_in_group(owner):
            for name in registry.names():
                try:
                    testing.run(name, SAMPLES, lookup_client=_no_lookup)
                except Exception as exc:  # noqa: BLE001 - the others' classes still count
                    print(f"{name}: not run ({type(exc).__name__})", file=sys.stderr)
            _exit_jvm()
        if not until_ended(list(owner.groups), EXIT_TIMEOUT_S):
            print(f"the JVM did not exit within {EXIT_TIMEOUT_S:.0f} s", file=sys.stderr)
            return 1
        return 0
    finally:
        owner.end()


def _exit_jvm() -> None:
    """System.exit in the gateway JVM: it archives its classes on the way out. The call
    never answers (the connection goes with the JVM)."""
    from pyflink.java_gateway import get_gateway

    try:
        get_gateway().jvm.java.lang.System.exit(0)
    except Exception:  # noqa: BLE001 - Py4J reports the closed connection
        pass
    disconnect_gateway()


if __name__ == "__main__":
    sys.exit(_exercise())
