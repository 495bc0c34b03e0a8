"""The loopback shim and the socket audit, on plain sockets: the audit finds a wildcard
listener (so the integration audits can fail), and the shim turns wildcard TCP binds into
loopback binds, IPv4 and IPv6 (dual-stack and IPv6-only), leaving UDP and explicit
addresses alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pipelines.host.loopback import SHIM, SHIM_SWITCH, preload_env
from tests.support import listening_sockets, not_loopback

pytestmark = pytest.mark.unit

BINDER = textwrap.dedent(
    """
    import socket, sys, time
    made = []
    for family, host, v6only in [
        (socket.AF_INET, "0.0.0.0", None),
        (socket.AF_INET6, "::", 0),
        (socket.AF_INET6, "::", 1),
        (socket.AF_INET, "127.0.0.1", None),
    ]:
        s = socket.socket(family, socket.SOCK_STREAM)
        if v6only is not None:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
        s.bind((host, 0))
        s.listen()
        made.append(s)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("0.0.0.0", 0))
    print(" ".join(str(s.getsockname()[0]) for s in made), u.getsockname()[0], flush=True)
    time.sleep(60)
    """
)


def _start(preload: bool):
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = str(SHIM)
    proc = subprocess.Popen(
        [sys.executable, "-c", BINDER], stdout=subprocess.PIPE, text=True, env=env
    )
    bound = proc.stdout.readline().split()
    return proc, bound


def test_the_audit_finds_wildcard_listeners():
    proc, bound = _start(preload=False)
    try:
        assert bound == ["0.0.0.0", "::", "::", "127.0.0.1", "0.0.0.0"]
        listeners = listening_sockets({proc.pid})
        assert len(listeners) == 4
        assert sorted(k.split("|")[0] for k in not_loopback(listeners)) == ["0.0.0.0", "::", "::"]
    finally:
        proc.kill()
        proc.wait()


def test_the_shim_binds_wildcard_tcp_listeners_to_loopback():
    assert SHIM.is_file(), "run `make jars` to build the shim"
    proc, bound = _start(preload=True)
    try:
        # IPv4 wildcard -> 127.0.0.1; dual-stack IPv6 -> IPv4-mapped 127.0.0.1; IPv6-only ->
        # ::1; an explicit address and a UDP socket as they were.
        assert bound == ["127.0.0.1", "::ffff:127.0.0.1", "::1", "127.0.0.1", "0.0.0.0"]
        listeners = listening_sockets({proc.pid})
        assert len(listeners) == 4 and not_loopback(listeners) == {}
    finally:
        proc.kill()
        proc.wait()


def test_switched_off_the_shim_is_not_preloaded_and_on_it_is(monkeypatch):
    monkeypatch.delenv(SHIM_SWITCH, raising=False)
    assert str(SHIM) in preload_env({"PATH": "/bin"})["LD_PRELOAD"].split(":")
    assert "LD_PRELOAD" not in preload_env({"PATH": "/bin", SHIM_SWITCH: "off"})
    monkeypatch.setenv(SHIM_SWITCH, "off")
    assert "LD_PRELOAD" not in preload_env({"PATH": "/bin"})


def test_every_flink_bind_option_is_loopback_in_the_mini_cluster_and_the_standalone_cluster(
    tmp_path, monkeypatch
):
    """Flink's own options first: the shim is then needed only for listeners with none
    (tests/integration/test_listeners.py measures what those are with the shim off)."""
    import yaml

    from pipelines.flink.environment import FLINK_BIND_OPTIONS, MINI_CLUSTER_ON_LOOPBACK
    from pipelines_dev.flink_cluster import Cluster

    assert set(FLINK_BIND_OPTIONS) == {
        "rest.bind-address", "jobmanager.bind-host", "taskmanager.bind-host"
    }  # fmt: skip
    cluster = Cluster(state_dir=tmp_path / "cluster")
    cluster.write_conf()
    conf = yaml.safe_load((cluster.conf_dir / "config.yaml").read_text())

    def flat(tree, prefix=""):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from flat(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    standalone = dict(flat(conf))
    for option in (*FLINK_BIND_OPTIONS, "rest.address", "taskmanager.host"):
        assert MINI_CLUSTER_ON_LOOPBACK[option] == "127.0.0.1", option
        assert standalone[option] == "127.0.0.1", option


def test_elsewhere_than_linux_the_shim_says_in_one_line_that_it_is_linux_only(monkeypatch, caplog):
    from pipelines.host import loopback

    monkeypatch.setattr(loopback.sys, "platform", "darwin")
    monkeypatch.setattr(loopback, "_warned", [])
    caplog.set_level("INFO", logger=loopback.__name__)
    assert "LD_PRELOAD" not in preload_env({"PATH": "/bin"})
    assert "LD_PRELOAD" not in preload_env({"PATH": "/bin"})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "the loopback shim is Linux-only" in lines[0], lines
    assert "on darwin" in lines[0]
