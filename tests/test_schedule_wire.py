"""Scheduled messages from the wire (issue 33, section 3): a real server,
the Python client. A message posted with a ``not_before`` is seen by a
COPY (a subscription or a selector, whatever its start) once, when it is
due, never before; one that comes due while its queue is full and has
nowhere to go is tried again every second, whatever else is scheduled.

The times are short (2-3 s ahead) and every wait has a generous deadline:
these pass on a loaded machine. "Exactly once" is checked with a sentinel
posted after the due message arrived: the stream is in order, so a second
copy would come before it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.message import now_us
from msgboard.testing import ServerThread
from tests.served import Served
from tests.test_replication import PATIENT, primary, standby
from tests.test_schedule import wait_for

S = 1_000_000


def scheduled(client: Client, queue: str) -> int:
    """The queue's scheduled count, as Stats says."""
    [st] = client.stats(queue).queues
    return st.scheduled


@dataclass
class Got:
    """What a subscription received: (µs it arrived, body), in order."""

    items: list[tuple[int, bytes]] = field(default_factory=list)
    #: Set to let the collector ack the delivery whose body is ``hold``.
    go: threading.Event = field(default_factory=threading.Event)

    def bodies(self) -> list[bytes]:
        return [body for _, body in list(self.items)]


@contextmanager
def collecting(client: Client, queue: str, credit: int, hold: bytes = b"") -> Iterator[Got]:
    """A COPY subscription from the oldest message, read by a thread that
    acks each delivery (the one whose body is ``hold`` only once ``go`` is
    set), noting when each arrived."""
    got = Got()
    sub = client.subscribe(queue, copy=True, start="head", credit=credit)

    def read() -> None:
        for d in sub:
            got.items.append((now_us(), d.message.body))
            if d.message.body == hold:
                got.go.wait(120)
            sub.ack(d)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield got
    finally:
        got.go.set()
        sub.end()  # from this thread; the reader's iteration then ends
        reader.join(30)
        sub.close()


def once_when_due(got: Got, at: int, body: bytes) -> None:
    """``body`` arrived once, not before ``at`` (µs)."""
    times = [t for t, b in list(got.items) if b == body]
    assert len(times) == 1, f"{body!r} delivered {len(times)} times: {got.bodies()}"
    assert times[0] >= at, f"{body!r} delivered {(at - times[0]) / S:.1f} s before its not_before"


@pytest.mark.parametrize("transient", [False, True])
def test_a_copy_subscription_from_the_oldest_gets_a_scheduled_message_once_when_due(
    client: Client, transient: bool
) -> None:
    """Given a waiting message, one due in 2 s and another waiting, when a
    COPY subscription starts at the oldest, I expect the two waiting ones at
    once and the scheduled one once, when due (it came at once and again
    when due); on a durable queue and a transient one."""
    client.create_queue("jobs", transient=transient)
    client.post("jobs", body="a")
    at = now_us() + 2 * S
    client.post("jobs", body="b", not_before=at)
    client.post("jobs", body="c")
    with collecting(client, "jobs", credit=10) as got:
        wait_for("the waiting two", lambda: {b"a", b"c"} <= set(got.bodies()))
        wait_for("the scheduled one", lambda: b"b" in got.bodies())
        client.post("jobs", body="z")
        wait_for("the sentinel", lambda: b"z" in got.bodies())
    once_when_due(got, at, b"b")
    assert got.bodies() == [b"a", b"c", b"b", b"z"]


@pytest.mark.parametrize("start", ["seq", "time"])
def test_a_copy_subscription_from_a_seq_or_a_time_gets_a_scheduled_message_once_when_due(
    client: Client, start: str
) -> None:
    """As from the oldest, starting at the scheduled message: at its seq,
    or at a time just before it was posted (a second after the one before)."""
    client.create_queue("jobs")
    client.post("jobs", body="a")
    time.sleep(1.1)  # a second of its own in the queue's index of times
    since = now_us()
    at = now_us() + 2 * S
    seq = client.post("jobs", body="b", not_before=at)
    got: list[tuple[int, bytes]] = []
    at_start = seq if start == "seq" else "time"
    with client.subscribe("jobs", copy=True, credit=10, start=at_start, start_time=since) as sub:
        client.post("jobs", body="c")
        for d in sub:
            got.append((now_us(), d.message.body))
            sub.ack(d)
            if d.message.body == b"b":
                client.post("jobs", body="z")
            if d.message.body == b"z":
                break
    assert [b for _, b in got] == [b"c", b"b", b"z"]
    assert got[1][0] >= at


def test_a_scheduled_message_due_while_a_copy_replays_past_it_is_not_lost(
    client: Client,
) -> None:
    """Given a COPY subscription from the oldest with credit 1 that holds
    its second delivery (so its replay is still going, past the scheduled
    message's seq) until the scheduled message has come due, I expect it
    still to get the scheduled one once, and everything else once."""
    client.create_queue("jobs")
    client.post("jobs", body="a")
    at = now_us() + 2 * S
    client.post("jobs", body="b", not_before=at)
    client.post("jobs", body="c")
    client.post("jobs", body="d")
    with collecting(client, "jobs", credit=1, hold=b"c") as got:
        wait_for("the held one", lambda: b"c" in got.bodies())
        wait_for("the release", lambda: scheduled(client, "jobs") == 0)
        got.go.set()
        wait_for("the rest", lambda: {b"b", b"d"} <= set(got.bodies()))
        client.post("jobs", body="z")
        wait_for("the sentinel", lambda: b"z" in got.bodies())
    once_when_due(got, at, b"b")
    assert sorted(got.bodies()) == [b"a", b"b", b"c", b"d", b"z"]


def test_a_copy_selector_from_the_oldest_copies_a_scheduled_message_once_when_due(
    client: Client,
) -> None:
    """Given a waiting message, one due in 3 s and another waiting, when a
    durable COPY selector into "out" starts at the oldest, I expect "out"
    to get the two at once and the scheduled one once, when due (it got it
    at once and again when due: two copies)."""
    client.create_queue("in")
    client.create_queue("out")
    client.post("in", body="a")
    at = now_us() + 3 * S
    client.post("in", body="b", not_before=at)
    client.post("in", body="c")
    client.create_selector("in", op="copy", to="out", start="head")
    wait_for("the waiting two", lambda: client.get_queue("out").unprocessed >= 2)
    early = [m.body for m in client.read("out", max=10)]
    assert b"b" not in early or now_us() >= at, "copied before its not_before"
    wait_for("the scheduled one", lambda: scheduled(client, "in") == 0)
    client.post("in", body="z")
    wait_for("the sentinel", lambda: b"z" in [m.body for m in client.read("out", max=10)])
    out = client.read("out", max=10)
    assert [m.body for m in out] == [b"a", b"c", b"b", b"z"]
    [b] = [m for m in out if m.body == b"b"]
    assert b.posted_at >= at, "copied before its not_before"


def test_a_message_due_in_a_full_queue_is_tried_every_second_whatever_else_is_scheduled(
    client: Client,
) -> None:
    """Given a queue of max_unprocessed 1 (reject, no dead-letter queue)
    that is full, a message due on it in 2 s, and another due in 2099 on
    another queue, when room is made after the first has come due, I expect
    it released within seconds (it stayed scheduled until 2099)."""
    client.create_queue("keep", max_unprocessed=1)
    client.create_queue("later")
    client.post("keep", body="x")
    at = now_us() + 2 * S
    client.post("keep", body="due", not_before=at)
    client.post("later", body="2099", not_before=4_070_908_800 * S)  # 2099-01-01
    wait_for("its time", lambda: now_us() > at + 2 * S)
    assert scheduled(client, "keep") == 1  # full: kept
    assert [m.body for m in client.take("keep")] == [b"x"]
    room = time.monotonic()
    wait_for("the retry", lambda: scheduled(client, "keep") == 0, 30)
    assert [m.body for m in client.take("keep", timeout=30)] == [b"due"]
    assert time.monotonic() - room < 30
    assert scheduled(client, "later") == 1


@pytest.mark.parametrize("transient", [False, True])
def test_browse_from_a_time_shows_the_scheduled_messages_posted_since(
    client: Client, transient: bool
) -> None:
    """Given a message posted, then (a second later) one scheduled for
    later, and one waiting, I expect a Browse from the time between them to
    start at the scheduled one: all sections, and the scheduled section
    alone (it started after it, or showed nothing)."""
    client.create_queue("jobs", transient=transient)
    client.post("jobs", body="a")
    time.sleep(1.1)  # a second of its own in the queue's index of times
    since = now_us()
    seq = client.post("jobs", body="b", not_before=now_us() + 3600 * S)
    page = client.browse("jobs", "time", since=since, section="scheduled")
    assert [(m.seq, m.body) for m in page.messages] == [(seq, b"b")]
    client.post("jobs", body="c")
    page = client.browse("jobs", "time", since=since)
    assert [m.body for m in page.messages] == [b"b", b"c"]


def test_a_standbys_board_after_a_failover_releases_what_the_primary_had_scheduled(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary and its standby, a message due in 1 s (released on
    the primary) and one due 6 s after it, when the primary is killed (-9)
    before the second is due and the standby's directory is opened as a
    board, I expect the first waiting there once and the second released
    there once, not before its time."""
    p = primary(tmp_path, *PATIENT)
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    with Client(p.address) as c:
        c.create_queue("jobs")
        soon = now_us() + S
        c.post("jobs", body="soon", not_before=soon)
        later = now_us() + 6 * S
        c.post("jobs", body="later", not_before=later)
        wait_for("the first released", lambda: scheduled(c, "jobs") == 1)
        c.post("jobs", body="after")  # its answer: the standby has the release
        early = now_us() < later
        p.kill()
    s.kill()
    (tmp_path / "s" / "ready.json").unlink(missing_ok=True)  # left by the kill
    board = Served(tmp_path / "s")  # the standby's directory, as a board
    stopped.append(board)
    with Client(board.address) as c:
        if early:  # the primary was killed before it was due
            assert scheduled(c, "jobs") == 1 or now_us() >= later
        got = [(now_us(), m.body) for m in c.take("jobs", max=3)]
        wait_for("the second released", lambda: scheduled(c, "jobs") == 0)
        got += [(now_us(), m.body) for m in c.take("jobs", max=3, timeout=30)]
        assert sorted(body for _, body in got) == [b"after", b"later", b"soon"]
        assert next(t for t, body in got if body == b"later") >= later
        assert c.take("jobs") == []


def test_get_queue_and_list_queues_count_the_scheduled_messages(
    server: ServerThread, client: Client
) -> None:
    """Given two messages scheduled an hour ahead and one waiting, I expect
    GetQueue and ListQueues to say 2 scheduled and 1 waiting over the wire
    (Queue.scheduled; it was always 0 there, though Stats counted them)."""
    import grpc

    from msgboard.v1 import board_pb2 as pb
    from msgboard.v1 import board_pb2_grpc as pb_grpc

    client.create_queue("later")
    client.post("later", body="a", not_before=now_us() + 3600 * S)
    client.post("later", body="b", not_before=now_us() + 3600 * S)
    client.post("later", body="c")
    assert (client.get_queue("later").scheduled, client.get_queue("later").unprocessed) == (2, 1)
    with grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.BoardStub(channel)
        got = stub.GetQueue(pb.GetQueueRequest(name="later"), timeout=30)
        listed = stub.ListQueues(pb.ListQueuesRequest(), timeout=30)
    assert (got.scheduled, got.unprocessed) == (2, 1)
    assert [(q.spec.name, q.scheduled) for q in listed.queues] == [("later", 2)]
