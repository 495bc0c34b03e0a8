"""Free ports for throw-away local services (a second broker, a test's enrichment service).

Ports come from below Linux's ephemeral range (32768-60999) on purpose. A port found with
bind(0) is released before the service binds it, and in that gap the kernel may hand it to any
outgoing connection or any other bind(0); the KRaft controller's P+1 is worse still, as connect()
prefers the even ports beside bind(0)'s odd ones. Two CI runs lost those races.
"""

from __future__ import annotations

import random
import socket

LOW, HIGH = 20000, 32000


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
    for _ in range(500):
        port = random.randrange(LOW, HIGH - count)
        if all(port_free(port + i) for i in range(count)):
            return port
    raise OSError(f"no {count} adjacent free port(s) found in {LOW}..{HIGH}")
