"""Every listener a local run opens binds loopback, including upstream ones with no bind
option.

Measured on a local `pipelines run` with a Python stage before this: the mini-cluster JVM
held 8 listening sockets on the wildcard address, 6 of them Beam's fn-execution services
for the Python worker (flink-python's Beam `ServerFactory` computes a loopback address,
then binds `NettyServerBuilder.forPort`, every interface), and this process held PyFlink's
worker pool on `[::]` (anyone reaching it could send `StartWorker` and have the harness run
their code). Two mechanisms close them:

- processes the project starts get `jars/lib/libloopback-bind.so` in LD_PRELOAD
  (jars/native/loopback_bind.c, built by `make jars`): a TCP bind to the wildcard address
  becomes a bind to loopback. `preload_env` adds it;
- gRPC servers started inside this Python process (PyFlink's and Beam's worker pools) are
  bound to `localhost` by `bind_grpc_to_loopback`.

Prism is a Go binary (Go makes its own system calls: LD_PRELOAD cannot reach them); it is
built with its two listeners patched to loopback (pipelines.beam.java.PRISM_PATCHES).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipelines.host.paths import JARS_DIR

log = logging.getLogger(__name__)

SOURCE = JARS_DIR / "native" / "loopback_bind.c"
SHIM = Path(os.environ.get("PIPELINES_JAR_LIB", JARS_DIR / "lib")) / "libloopback-bind.so"
_warned: list[bool] = []


class ShimError(Exception):
    """The shim did not compile; pipelines.host.jars reports it as a JarError."""


def build_shim() -> Path | None:
    """Compile the shim when missing or older than its source; None (and one line saying
    what that means) where no C compiler is installed."""
    if not sys.platform.startswith("linux"):
        log.info(f"skipped  {SHIM.name}: the loopback shim is Linux-only (docs/security.md)")
        return None
    if SHIM.is_file() and SHIM.stat().st_mtime >= SOURCE.stat().st_mtime:
        log.info(f"ok       {SHIM.name}")
        return SHIM
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.info(
            f"warning: no C compiler: {SHIM.name} not built; Flink's and Beam's own "
            f"listeners will bind every interface (apt-get install gcc, then `make jars`)"
        )
        return None
    SHIM.parent.mkdir(parents=True, exist_ok=True)
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(SHIM), str(SOURCE), "-ldl"],
        capture_output=True,
        text=True,
    )
    if built.returncode != 0:
        raise ShimError(f"{compiler} failed on {SOURCE.name}: {built.stderr.strip()[-500:]}")
    log.info(f"built    {SHIM.name}")
    return SHIM


# `PIPELINES_LOOPBACK_SHIM=off` runs without the shim: Flink's own bind options still put
# every listener that has one on loopback, and what is left on the wildcard is the list in
# docs/security.md (tests/integration/test_listeners.py checks it). Also the way out where
# LD_PRELOAD is unwanted (a sanitizer, another preload).
SHIM_SWITCH = "PIPELINES_LOOPBACK_SHIM"


def shim_switched_off(env: dict[str, str] | None = None) -> bool:
    value = (env or {}).get(SHIM_SWITCH) or os.environ.get(SHIM_SWITCH, "on")
    return value.strip().lower() in ("off", "0", "false", "no")


def preload_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with the shim first in LD_PRELOAD (a copy); unchanged, with one warning per
    process, where it was not built or is switched off."""
    if not sys.platform.startswith("linux"):
        if not _warned:
            _warned.append(True)
            log.info(
                f"warning: the loopback shim is Linux-only (an LD_PRELOAD of glibc's bind); "
                f"on {sys.platform} Flink's bind options keep its own listeners on loopback "
                f"and the ones docs/security.md lists bind every interface"
            )
        return dict(env)
    if shim_switched_off(env):
        if not _warned:
            _warned.append(True)
            log.info(
                f"warning: {SHIM_SWITCH}=off: listeners with no bind option in Flink or Beam "
                f"bind every interface in this run (docs/security.md lists them)"
            )
        return dict(env)
    if not SHIM.is_file():
        if not _warned:
            _warned.append(True)
            log.info(
                f"warning: {SHIM} is missing (run `make jars`): Flink's and Beam's own "
                f"listeners bind every interface in this run"
            )
        return dict(env)
    existing = env.get("LD_PRELOAD", "")
    if str(SHIM) in existing.split(":"):
        return dict(env)
    return {**env, "LD_PRELOAD": f"{SHIM}:{existing}" if existing else str(SHIM)}


class _LoopbackServer:
    """A grpc.Server whose wildcard ports are bound on localhost (both loopbacks)."""

    def __init__(self, server):
        self._server = server

    def add_insecure_port(self, address: str) -> int:
        host, _, port = address.rpartition(":")
        if host in ("[::]", "0.0.0.0", "", "[::0]"):
            address = f"localhost:{port}"
        return self._server.add_insecure_port(address)

    def __getattr__(self, name):
        return getattr(self._server, name)


class _LoopbackGrpc:
    """The grpc module as seen by the worker-pool modules: `server()` wraps its result."""

    def __init__(self, grpc):
        self._grpc = grpc

    def server(self, *args, **kwargs):
        return _LoopbackServer(self._grpc.server(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self._grpc, name)


# The modules that start a gRPC worker pool in this process and bind it to `[::]`.
PYFLINK_WORKER_POOL = "pyflink.fn_execution.beam.beam_worker_pool_service"  # local Flink runs
BEAM_WORKER_POOL = "apache_beam.runners.worker.worker_pool_main"  # `pipelines beam run`


def bind_grpc_to_loopback(module_name: str) -> None:
    """Bind the worker pool of `module_name` to localhost. One module per kind of run:
    importing PyFlink's fn_execution into a Beam pipeline's process registers PyFlink's
    operations with Beam, and every Beam run then failed ("Error parsing message with type
    'org.apache.flink.fn_execution.v1.UserDefinedDataStreamFunction'")."""
    import importlib

    import grpc

    module = importlib.import_module(module_name)
    if not isinstance(getattr(module, "grpc"), _LoopbackGrpc):
        setattr(module, "grpc", _LoopbackGrpc(grpc))
