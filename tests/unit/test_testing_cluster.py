"""pipelines.testing's runs share one mini-cluster in the test process's JVM, with their
Python operators in threads of the test process: what makes a job's logic test take about
a second after the first (`make bench-inner-loop` measures it)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request

import pytest

from pipelines import testing
from pipelines.flink import workers
from pipelines.running.processes import descendants
from tests.support import listening_sockets, not_loopback

pytestmark = pytest.mark.unit


class PidDouble:
    """Answers with the id of the process it runs in."""

    async def lookup(self, record: dict) -> dict:
        return {"pid": os.getpid()}

    async def close(self) -> None:
        pass


def pid_double(settings) -> PidDouble:
    return PidDouble()


def finished_jobs(port: str) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/jobs/overview", timeout=10) as r:
        return [job["name"] for job in json.load(r)["jobs"] if job["state"] == "FINISHED"]


def test_runs_share_one_mini_cluster_and_their_python_runs_in_this_process():
    first = testing.run("enrich", [{"id": 1, "company": "Acme"}], lookup_client=pid_double)
    port = testing._SHARED["conf"]["rest.port"]
    before = finished_jobs(port).count("enrich-test")
    second = testing.run("enrich", [{"id": 2, "company": "Acme"}], lookup_client=pid_double)
    assert testing._SHARED["conf"]["rest.port"] == port
    assert finished_jobs(port).count("enrich-test") == before + 1
    # The double ran in this process both times: in the worker pool's threads, started by
    # the boot script (workers.in_process_worker_boot), not in a Python worker process.
    assert [r["enrichment"]["pid"] for r in first.records + second.records] == [os.getpid()] * 2


def test_the_shared_cluster_and_the_worker_pool_listen_on_loopback_only():
    testing.run("passthrough", [b"a"])
    conf = testing._SHARED["conf"]
    pool = conf["python.loopback-server.address"].rpartition(":")[2]
    ours = {conf["rest.port"], pool, str(workers._BOOT["port"])}
    me = os.getpid()
    listeners = listening_sockets(descendants(me))
    # This process also holds what earlier tests of the session opened in it (Beam's
    # in-process runners): of its own listeners, the pool's and the boot script's are
    # checked; every one of the JVM's (the mini-cluster's) is.
    checked = {a: pid for a, pid in listeners.items() if pid != me or a.rpartition("|")[2] in ours}
    assert ours <= {address.rpartition("|")[2] for address in checked}
    assert not_loopback(checked) == {}


def test_a_job_wider_than_the_shared_cluster_runs_on_a_mini_cluster_of_its_own():
    testing.run("passthrough", [b"a"])  # the shared cluster is up
    port = testing._SHARED["conf"]["rest.port"]
    before = finished_jobs(port)
    wide = f"job.parallelism={testing.SLOTS + 1}"
    out = testing.run("passthrough", [b"x", b"y"], overrides=[wide])
    assert sorted(out.records) == [b"x", b"y"]
    assert finished_jobs(port) == before


def test_the_boot_script_answers_where_pyflink_is_as_the_interpreter_would():
    boot = str(workers.in_process_worker_boot())
    question = ["-c", workers._PYFLINK_BIN_QUESTION]
    asked = subprocess.run([boot, *question], capture_output=True, text=True, timeout=60)
    real = subprocess.run([sys.executable, *question], capture_output=True, text=True, timeout=60)
    assert (asked.returncode, asked.stdout) == (0, real.stdout) != (0, "")
    other = subprocess.run([boot, "-c", "print(6 * 7)"], capture_output=True, text=True, timeout=60)
    assert other.stdout == "42\n"  # anything else is the interpreter itself


def test_the_boot_listener_starts_no_worker_for_a_caller_without_the_token():
    workers.in_process_worker_boot()
    with socket.create_connection(("127.0.0.1", workers._BOOT["port"]), timeout=30) as conn:
        conn.sendall(b"not-the-token\x001-1\x00localhost:1\x00/tmp\x00A=b\x00\x00")
        assert conn.recv(16) == b""  # closed, no status: nothing was started
