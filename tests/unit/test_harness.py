"""The harness's own checks can fail: an orphaned worker is found, a process tree is ended."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import pytest

from tests.support import ROOT, orphaned_flink_processes, process_tree, still_alive

pytestmark = pytest.mark.unit


def test_an_orphaned_worker_of_this_checkout_is_found():
    # A stand-in named like a Flink Python worker of this checkout, whose parent exits at
    # once: it is re-parented to the test session (a subreaper), as a leaked worker is.
    name = f"beam_boot {ROOT} harness-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["bash", "-c", f'(exec -a "{name}" sleep 60) &'], check=True, start_new_session=True
    )

    def mine() -> dict[int, str]:
        return {pid: cmd for pid, cmd in orphaned_flink_processes().items() if name in cmd}

    deadline = time.monotonic() + 10
    found: dict[int, str] = {}
    while not found and time.monotonic() < deadline:
        found = mine()
        time.sleep(0.1)
    try:
        assert len(found) == 1
    finally:
        for pid in found:
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while mine() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mine() == {}


def test_children_the_session_started_are_not_orphans():
    """This session's own gateway JVM (its parent is this process) is not a leak."""
    from pyflink.java_gateway import get_gateway

    assert get_gateway().jvm.java.lang.System.currentTimeMillis() > 0
    assert orphaned_flink_processes() == {}


def test_process_tree_follows_children_and_their_groups():
    parent = subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        tree = {}
        while len(tree) < 3 and time.monotonic() < deadline:
            tree = process_tree(parent.pid)
            time.sleep(0.05)
        assert len(tree) == 3
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
    time.sleep(0.2)
    assert still_alive(tree) == {}
