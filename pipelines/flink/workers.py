"""Python workers in this process: PyFlink's worker pool bound to loopback, and the boot
script that hands a TaskManager's worker to it without starting a Python per job. Written for
apache-flink 2.2.1's internals (tests/unit/test_flink_compat.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from pipelines.host.loopback import PYFLINK_WORKER_POOL, bind_grpc_to_loopback


def in_process_worker_pool() -> str:
    """The address of PyFlink's Python worker pool in this process, started once and bound
    to loopback: jobs whose configuration names it (`python.loopback-server.address`) run
    their Python operators in threads here instead of a `pyflink-udf-runner` process each.

    PyFlink 2.2 starts it only for its own local target
    (`StreamExecutionEnvironment._open`): `BeamFnLoopbackWorkerPoolServicer` is a
    singleton whose `start()` returns the address it serves on."""
    bind_grpc_to_loopback(PYFLINK_WORKER_POOL)  # it binds [::] otherwise
    from pyflink.fn_execution.beam.beam_worker_pool_service import (
        BeamFnLoopbackWorkerPoolServicer,
    )

    return str(BeamFnLoopbackWorkerPoolServicer().start())


# What the TaskManager runs (via pyflink-udf-runner.sh, as `$python -m ...beam_boot --id=..
# --provision_endpoint=..`) to have a Python worker started: this hands the worker's id,
# provision endpoint and environment to the pool of the process that wrote it, over
# loopback, then holds until that worker ends. PyFlink's beam_boot does the same over gRPC
# but first imports apache_beam: 1.5-2 s of every job, most of a logic test's time.
_BOOT_SCRIPT = """#!/bin/bash
# pipelines: a Python worker for the in-process pool of process {pid} (pipelines.testing)
if [ "$1" = -c ] && [ "$2" = {where_question} ]; then
  echo {where_answer}  # where pyflink-udf-runner.sh is, asked before each worker
  exit 0
elif [ "$1 $2" != "-m pyflink.fn_execution.beam.beam_boot" ]; then
  exec {python} "$@"  # anything else: the interpreter itself
fi
id="" provision="" semi=/tmp
while [ $# -gt 0 ]; do
  case "$1" in
    --id=*) id="${{1#--id=}}" ;;
    --provision_endpoint=*) provision="${{1#--provision_endpoint=}}" ;;
    --semi_persist_dir=*) semi="${{1#--semi_persist_dir=}}" ;;
  esac
  shift
done
exec 3<>/dev/tcp/127.0.0.1/{port} || exit 1
{{
  printf '%s\\0' "$(cat "$(dirname "$0")/token")" "$id" "$provision" "$semi"
  for name in $(compgen -e); do printf '%s=%s\\0' "$name" "${{!name}}"; done  # the environment
  printf '\\0'
}} >&3
read -r -u 3 status
exit "${{status:-1}}"
"""


_BOOT: dict[str, Any] = {}  # the script and the port of its listener, once started


# Flink 2.2's PythonEnvironmentManagerUtils asks the worker's interpreter where PyFlink's
# bin directory is, with this program, before each worker starts.
_PYFLINK_BIN_QUESTION = (
    "import pyflink;import os;"
    "print(os.path.join(os.path.abspath(os.path.dirname(pyflink.__file__)), 'bin'))"
)


def in_process_worker_boot() -> Path:
    """A `python.executable` for jobs whose Python workers run in this process's pool
    (`in_process_worker_pool`): the script above, and the loopback listener it talks to,
    started once. PyFlink 2.2: the pool's `StartWorker(request, context)`, which runs the
    worker until it ends."""
    if "script" in _BOOT:
        return Path(_BOOT["script"])
    import atexit
    import secrets
    import shlex
    import shutil
    import socket
    import sys
    import tempfile

    import pyflink

    in_process_worker_pool()
    listener = socket.create_server(("127.0.0.1", 0))
    token = secrets.token_hex(16)
    home = Path(tempfile.mkdtemp(prefix="pipelines-boot-"))  # 0700
    atexit.register(shutil.rmtree, home, True)
    (home / "token").write_text(token)
    script = home / "boot"
    script.write_text(
        _BOOT_SCRIPT.format(
            pid=os.getpid(),
            port=listener.getsockname()[1],
            python=shlex.quote(sys.executable),
            where_question=shlex.quote(_PYFLINK_BIN_QUESTION),
            where_answer=shlex.quote(
                os.path.join(os.path.abspath(os.path.dirname(pyflink.__file__)), "bin")
            ),
        )
    )
    script.chmod(0o700)
    threading.Thread(
        target=_serve_boots, args=(listener, token), name="pipelines-boot", daemon=True
    ).start()
    _BOOT.update(script=script, port=listener.getsockname()[1])
    return script


def _serve_boots(listener, token: str) -> None:
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_boot_worker, args=(conn, token), daemon=True).start()


def _boot_worker(conn, token: str) -> None:
    """Start the worker one boot script asked for and answer its exit status (0: the worker
    ran and ended) when it ends; a connection without this process's token is closed."""
    import hmac

    from apache_beam.portability.api import beam_fn_api_pb2, endpoints_pb2
    from pyflink.fn_execution.beam.beam_worker_pool_service import (
        BeamFnLoopbackWorkerPoolServicer,
    )

    with conn:
        data = b""
        while not data.endswith(b"\0\0"):
            chunk = conn.recv(1 << 16)
            if not chunk:
                return
            data += chunk
        given, worker_id, provision, semi, *entries = data[:-2].decode().split("\0")
        if not hmac.compare_digest(given, token):
            return
        params = dict(entry.partition("=")[::2] for entry in entries)
        params["SEMI_PERSISTENT_DIRECTORY"] = semi
        request = beam_fn_api_pb2.StartWorkerRequest(
            worker_id=worker_id,
            provision_endpoint=endpoints_pb2.ApiServiceDescriptor(url=provision),
            params=params,
        )
        response = BeamFnLoopbackWorkerPoolServicer().StartWorker(request, None)
        try:
            conn.sendall(b"1\n" if response.error else b"0\n")
        except OSError:  # the TaskManager ended the script first
            pass
