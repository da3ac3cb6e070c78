"""The drop-head overflow policy (issue 35 item 12, as RabbitMQ's
``drop-head``), over the wire to a real server: a post to a full queue is
stored and the oldest *waiting* message is dropped (history exit
``dropped``, reason ``overflow``; the post counted in ``overflowed``). A
message delivered or leased and not acked is not waiting: never dropped;
with every waiting message held the post is dropped instead. A scheduled
message is never dropped while scheduled, and one that comes due into the
full queue makes room as a post does. An overflow selector comes first;
MOVE and COPY selectors into the queue wait for room as with every other
policy. The CLI and the Python client take the value."""

from __future__ import annotations

import json
import time

import pytest

from msgboard.cli.main import main
from msgboard.client import Client, OverflowPolicy
from msgboard.message import Exit, ExitKind, Message, Section, now_us
from msgboard.results import QueueStats
from msgboard.spec import UNLIMITED, Disposition, Op, Receipt, Role
from msgboard.testing import ServerThread

DROPPED_HEAD = Exit(ExitKind.DROPPED, "overflow")


def until(what: str, cond: object, seconds: float = 60.0) -> None:
    """Waits for ``cond()`` with a generous deadline (a loaded machine)."""
    assert callable(cond)
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, f"not within {seconds} s: {what}"
        time.sleep(0.05)


def stats(client: Client, queue: str) -> QueueStats:
    [st] = client.stats(queue).queues
    return st


def waiting(client: Client, queue: str) -> list[tuple[int, object]]:
    page = client.browse(queue, section=Section.UNPROCESSED, limit=100)
    return [(m.seq, m.tuple[0]) for m in page.messages]


def history(client: Client, queue: str) -> list[tuple[int, Exit | None]]:
    page = client.browse(queue, section=Section.HISTORY, limit=100)
    return [(m.seq, m.exit) for m in page.messages]


def full(client: Client, name: str = "q", n: int = 3, **kw: object) -> None:
    """A drop-head queue of max_unprocessed ``n``, holding ``n`` messages
    (tuples 0..n-1, seqs 1..n), keeping its whole history."""
    client.create_queue(name, max_unprocessed=n, overflow="drop-head", max_history=UNLIMITED, **kw)  # type: ignore[arg-type]
    client.post_receipts(name, [Message(tuple=(i,)) for i in range(n)])


def test_a_post_to_a_full_queue_is_stored_and_the_oldest_is_dropped(client: Client) -> None:
    """Given a full drop-head queue of 3, when two messages are posted one
    at a time and then a batch of four, I expect every post STORED under
    its seq, the queue at 3 with the newest, each message dropped in
    history as `dropped` (overflow) in seq order, and `overflowed` 6."""
    full(client)
    assert client.post_receipts("q", [Message(tuple=(3,))]) == [Receipt(4, Disposition.STORED)]
    assert client.post_receipts("q", [Message(tuple=(4,))]) == [Receipt(5, Disposition.STORED)]
    assert waiting(client, "q") == [(3, 2), (4, 3), (5, 4)]
    batch = [Message(tuple=(i,)) for i in range(5, 9)]
    assert client.post_receipts("q", batch) == [
        Receipt(seq, Disposition.STORED) for seq in range(6, 10)
    ]
    assert waiting(client, "q") == [(7, 6), (8, 7), (9, 8)]
    assert history(client, "q") == [(seq, DROPPED_HEAD) for seq in range(1, 7)]
    st = stats(client, "q")
    assert (st.unprocessed, st.posted, st.overflowed, st.dead_lettered) == (3, 9, 6, 0)


def test_a_held_message_is_never_dropped(client: Client) -> None:
    """Given a full drop-head queue whose oldest message is leased, I expect
    a post to drop the oldest one not held; the leased one acks as usual.
    With every message held (leased), I expect the post itself dropped
    (seq 0, DROPPED), counted, and the held ones kept."""
    full(client)
    [lease] = client.take_leased("q", lease=300)
    assert lease.message.seq == 1
    assert client.post_receipts("q", [Message(tuple=(3,))]) == [Receipt(4, Disposition.STORED)]
    assert waiting(client, "q") == [(1, 0), (3, 2), (4, 3)]
    assert history(client, "q") == [(2, DROPPED_HEAD)]
    assert client.ack("q", [lease]).ids == [lease.id]
    # Every waiting message held: nothing to drop, so the post is dropped.
    client.post_receipts("q", [Message(tuple=(4,))])  # drops nothing: room after the ack
    held = client.take_leased("q", lease=300, max=3)
    assert [d.message.seq for d in held] == [3, 4, 5]
    assert client.post_receipts("q", [Message(tuple=(9,))]) == [Receipt(0, Disposition.DROPPED)]
    assert waiting(client, "q") == [(3, 2), (4, 3), (5, 4)]
    st = stats(client, "q")
    assert (st.unprocessed, st.outstanding, st.overflowed) == (3, 3, 2)


def test_a_subscribers_unacked_delivery_is_not_dropped(client: Client) -> None:
    """Given a consumer holding the oldest message of a full drop-head
    queue (delivered, not acked), I expect a post to drop the next one."""
    full(client)
    with client.subscribe("q", credit=1) as sub:
        first = next(iter(sub))
        assert first.message.seq == 1
        client.post_receipts("q", [Message(tuple=(3,))])
        assert history(client, "q") == [(2, DROPPED_HEAD)]
        sub.ack(first)
        until(
            "the ack",
            lambda: [e.kind for s, e in history(client, "q") if s == 1 and e] == [ExitKind.ACKED],
        )


def test_a_scheduled_message_is_not_dropped_and_coming_due_makes_room(client: Client) -> None:
    """Given a full drop-head queue and a message scheduled a second ahead,
    I expect posts meanwhile to drop waiting messages only (the scheduled
    one takes no room and stays), and, once due, the scheduled one to come
    in dropping the oldest waiting message, under its own seq."""
    full(client)
    due = now_us() + 1_000_000
    [r] = client.post_receipts("q", [Message(tuple=("later",), not_before=due)])
    assert r == Receipt(4, Disposition.STORED)
    client.post_receipts("q", [Message(tuple=(4,))])  # seq 5: drops seq 1
    assert waiting(client, "q") == [(2, 1), (3, 2), (5, 4)]
    assert stats(client, "q").scheduled == 1
    until("the release", lambda: stats(client, "q").scheduled == 0)
    assert waiting(client, "q") == [(3, 2), (4, "later"), (5, 4)]
    assert history(client, "q") == [(1, DROPPED_HEAD), (2, DROPPED_HEAD)]
    assert stats(client, "q").overflowed == 2


def test_an_overflow_selector_comes_first(client: Client) -> None:
    """Given a full drop-head queue with an overflow selector to a queue
    of room 1, I expect the first post over the limit to go to it
    (OVERFLOWED), and the next, that queue full, to drop the oldest."""
    client.create_queue("spill", max_unprocessed=1)
    full(client)
    client.create_selector("q", to="spill", role=Role.OVERFLOW)
    two = [Message(tuple=(3,)), Message(tuple=(4,))]
    assert client.post_receipts("q", two) == [
        Receipt(0, Disposition.OVERFLOWED),
        Receipt(4, Disposition.STORED),  # the overflowed one took no seq here
    ]
    assert waiting(client, "spill") == [(1, 3)]
    assert waiting(client, "q") == [(2, 1), (3, 2), (4, 4)]


def test_selectors_into_a_full_drop_head_queue_wait_for_room(client: Client) -> None:
    """Given a full drop-head queue fed by a MOVE selector and a COPY
    selector, I expect neither to drop anything there: the MOVE's message
    waits on its source, the COPY's copy is lost (counted in the source's
    `dropped`), as under every other policy; taking one makes room and the
    MOVE brings its message in."""
    full(client)
    client.create_queue("in")
    client.create_queue("tap")
    client.create_selector("in", to="q", op=Op.MOVE, templates=[("move",)])
    client.create_selector("tap", to="q", op=Op.COPY)
    client.post_receipts("in", [Message(tuple=("move",))])
    client.post_receipts("tap", [Message(tuple=("copy",))])
    assert waiting(client, "q") == [(1, 0), (2, 1), (3, 2)]
    assert waiting(client, "in") == [(1, "move")]
    assert stats(client, "tap").dropped == 1
    assert history(client, "q") == []
    client.take("q")
    until("the MOVE's pull", lambda: waiting(client, "in") == [])
    assert waiting(client, "q") == [(2, 1), (3, 2), (4, "move")]


def test_the_python_client_and_the_cli_take_drop_head(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """I expect `overflow=OverflowPolicy.DROP_HEAD`, `"drop-head"` and the
    CLI's `--overflow drop-head` to make the same queue (idempotent), shown
    as drop-head; and the CLI's post into it full to print the new seq."""
    view = client.create_queue("a", max_unprocessed=1, overflow=OverflowPolicy.DROP_HEAD)
    assert view.spec.overflow is OverflowPolicy.DROP_HEAD
    client.create_queue("a", max_unprocessed=1, overflow="drop-head")
    args = ["queue", "create", "a", "--max-unprocessed", "1", "--overflow", "drop-head"]
    assert main([*args, "--server", server.address]) == 0
    capsys.readouterr()
    assert main(["queue", "get", "a", "--json", "--server", server.address]) == 0
    assert json.loads(capsys.readouterr().out)["overflow"] == "drop-head"
    for expect in ("1", "2"):
        assert main(["post", "a", "--tuple", "[1]", "--server", server.address]) == 0
        assert capsys.readouterr().out.strip() == expect
    assert waiting(client, "a") == [(2, 1)]
