"""The harness's own checks can fail: an orphaned worker is found, a process tree is ended."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.support import ROOT, orphaned_flink_processes, process_tree, still_alive

pytestmark = pytest.mark.unit


def test_an_orphaned_worker_of_this_checkout_is_found():
    # A stand-in named like a Flink Python worker of this checkout, whose parent exits at
    # once: it is re-parented to the test session (a subreaper), as a leaked worker is.
    subprocess.run(["bash", "-c", f'(exec -a "beam_boot {ROOT}" sleep 60) &'], check=True)
    deadline = time.monotonic() + 10
    found = {}
    while not found and time.monotonic() < deadline:
        found = orphaned_flink_processes()
        time.sleep(0.1)
    try:
        assert len(found) == 1 and f"beam_boot {ROOT}" in next(iter(found.values()))
    finally:
        for pid in found:
            subprocess.run(["kill", "-9", str(pid)])
    time.sleep(0.2)
    assert orphaned_flink_processes() == {}


def test_process_tree_follows_children_and_their_groups():
    parent = subprocess.Popen(["bash", "-c", "sleep 60 & sleep 60 & wait"],
                              start_new_session=True)
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
