"""Loopback ports for a process a test starts later: ``free_ports``.

A port found by binding port 0 comes from the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``), the range every other bind
to port 0 and every outgoing connection's local end draws from too. Once
the finder lets it go, any of those may take it before the child binds
it: a board then fails to start ("Address already in use"), or, worse,
fails to bind it again when it swaps its server at a change of role and
exits. On a busy machine (other tests' servers binding port 0, boards and
proxies opening connections) that happens. So the ports handed out here
lie below that range, where only an explicit bind takes a port, and each
is checked free by binding it.
"""

from __future__ import annotations

import random
import socket
from contextlib import ExitStack
from pathlib import Path

#: The lowest port handed out (clear of the usual fixed service ports).
LOW = 10000
RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral() -> tuple[int, int]:
    """The kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        lo, hi = RANGE.read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def outside() -> list[int]:
    """The ports a test may take: those from ``LOW`` up that are not ephemeral."""
    lo, hi = ephemeral()
    return [p for p in [*range(LOW, lo), *range(hi + 1, 65536)] if p >= LOW]


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports free now, outside the ephemeral range
    (inside it only if the range leaves no room)."""
    pool = outside()
    with ExitStack() as stack:
        found: list[int] = []
        for port in random.sample(pool, min(len(pool), 50 * n)):
            if len(found) == n:
                break
            s = stack.enter_context(socket.socket())
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken: another
            found.append(port)
        while len(found) < n:  # no room outside the range
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            found.append(int(s.getsockname()[1]))
        return found
