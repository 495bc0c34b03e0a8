"""Free ports for throw-away local services (a second broker, a test's enrichment service).

Ports come from below Linux's ephemeral range (32768-60999) on purpose. A port found with
bind(0) is released before the service binds it, and in that gap the kernel may hand it to any
outgoing connection or any other bind(0); the KRaft controller's P+1 is worse still, as connect()
prefers the even ports beside bind(0)'s odd ones.
"""

from __future__ import annotations

import os
import random
import socket

LOW, HIGH = 20000, 32000


def port_range() -> tuple[int, int]:
    """LOW..HIGH, or $PIPELINES_PORT_RANGE ("20000-25999"): runs side by side on one machine
    (the test suite's two workers) each take ports from a range of their own, so that one
    never takes a port the other has found free and not yet bound."""
    given = os.environ.get("PIPELINES_PORT_RANGE")
    if not given:
        return LOW, HIGH
    try:
        low, high = (int(part) for part in given.split("-"))
    except ValueError:
        raise ValueError(f"PIPELINES_PORT_RANGE={given!r}: expected LOW-HIGH, e.g. 20000-25999")
    if not 1024 <= low < high <= 65535:
        raise ValueError(f"PIPELINES_PORT_RANGE={given!r}: expected 1024 <= LOW < HIGH <= 65535")
    return low, high


def share(index: int, count: int) -> str:
    """The PIPELINES_PORT_RANGE of run `index` of `count` side by side: LOW..HIGH split into
    `count` ranges that do not overlap."""
    span = (HIGH - LOW) // count
    low = LOW + index * span
    return f"{low}-{low + span - 1}"


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int = 1) -> int:
    """A port P such that P .. P+count-1 are free now."""
    low, high = port_range()
    for _ in range(500):
        port = random.randrange(low, high - count)
        if all(port_free(port + i) for i in range(count)):
            return port
    raise OSError(f"no {count} adjacent free port(s) found in {low}..{high}")
