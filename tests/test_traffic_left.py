"""Every way a message leaves its queue is counted (``Traffic.left``), the
count the console's "out /s" is the rate of (issue 35, item 1: a queue
drained by Subscribe consumers showed out 0.0, as only Take was counted).

Given a served board and its engine, when messages leave a queue by a Take,
a Subscribe's acks, a leased Take's ack, a MOVE selector, a move, a delete,
a purge and an expiry, I expect ``left`` to count each of them once, and a
COPY (which leaves the message where it was) not at all."""

from __future__ import annotations

import time

from msgboard.client import Client
from msgboard.message import now_us
from msgboard.testing import ServerThread

S = 1_000_000


def left(server: ServerThread, queue: str, want: int) -> int:
    """The queue's ``left`` count once it reaches ``want`` (counts are added
    once their batch is durable), or what it is after 30 s."""
    assert server.board is not None
    deadline = time.monotonic() + 30
    while True:
        t = server.board.traffic_async().result(30).get(queue)
        got = t.left if t is not None else 0
        if got >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_every_way_a_message_leaves_is_counted(server: ServerThread, client: Client) -> None:
    client.create_queue("jobs")
    for i in range(3):
        client.post("jobs", ("take", i))
    assert len(client.take("jobs", max=3, timeout=0)) == 3
    assert left(server, "jobs", 3) == 3
    # Subscribe: each ack is a message gone (the case of the issue).
    client.create_queue("orders")
    for i in range(4):
        client.post("orders", ("order", i))
    with client.subscribe("orders", credit=10) as sub:
        for _ in range(4):
            sub.ack(next(iter(sub)))
    assert left(server, "orders", 4) == 4  # the acks sent as the stream closes
    # A leased Take counts at its ack, not before.
    client.post("orders", ("leased",))
    [d] = client.take_leased("orders", lease=30)
    assert left(server, "orders", 4) == 4
    assert client.ack("orders", [d]).ids == [d.id]
    assert left(server, "orders", 5) == 5
    # A MOVE selector moves each message on; a COPY leaves it.
    client.create_queue("in")
    client.create_queue("out")
    client.create_queue("audit")
    client.create_selector("in", op="copy", to="audit")
    client.create_selector("in", op="move", to="out")
    client.post("in", ("x",))
    client.post("in", ("y",))
    assert left(server, "in", 2) == 2
    assert left(server, "audit", 0) == 0
    # A move, a delete and a purge of waiting messages.
    assert len(client.move_messages("out", "audit", seqs=[1])) == 1
    assert left(server, "out", 1) == 1
    client.delete_messages("out", seqs=[2])
    assert left(server, "out", 2) == 2
    for i in range(3):
        client.post("audit", ("more", i))
    assert client.purge_queue("audit").purged == 6  # 2 copies, 1 moved, 3 posted
    assert left(server, "audit", 6) == 6
    # An expiry (into no dead-letter queue: dropped).
    client.create_queue("short")
    client.post("short", ("soon",), expires_at=now_us() + S // 5)
    assert left(server, "short", 1) == 1
