"""Ports for processes a test starts later (tests/ports.py): outside the
kernel's ephemeral range, where no bind to port 0 and no outgoing
connection can take one before the process binds it."""

from __future__ import annotations

import socket

import pytest

import tests.ports
from tests.ports import LOW, ephemeral, free_ports


def test_the_ports_lie_outside_the_range_the_kernel_hands_out() -> None:
    """Given the ephemeral range, I expect distinct ports outside it, each
    free to bind, while a bind to port 0 lands inside it (the hazard)."""
    lo, hi = ephemeral()
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert all(p >= LOW and not lo <= p <= hi for p in ports), (ports, lo, hi)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert lo <= s.getsockname()[1] <= hi


def test_a_port_taken_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given every candidate port but one bound by someone, I expect that one."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = int(held.getsockname()[1])
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            free = int(other.getsockname()[1])
        monkeypatch.setattr(tests.ports, "outside", lambda: [taken, free])
        assert free_ports(1) == [free]
