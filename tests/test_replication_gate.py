"""A primary shows nothing of a group before its standbys have it, and
answers nothing of a failed group with OK, told with real processes.

Two kinds of standby: a real one (``msgboard serve --standby-of``) paused
with SIGSTOP, and one the test plays itself (``Follower``: a Follow stream
over gRPC whose acknowledgements the test sends, entry by entry), so that
one group can be on "the standby" while the next is not.

The stories: a Take blocked on an empty queue, woken by a post whose group
then fails to reach the standby (the strict wait runs out, or the primary
stops), is answered UNAVAILABLE, never with the message; a consumer gets
the message of a group only once the standby acknowledged that group, even
when the next group's message is handed to it meanwhile. The check the
consumer story uses is shown to catch a primary that does not wait (the
same story with ``--sync-standbys 0``).
"""

from __future__ import annotations

import os
import queue
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from msgboard.client import Client
from msgboard.errors import MsgboardError, Unavailable
from msgboard.lmdbstore.oplog import decode, index_of
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc
from tests.served import Served
from tests.test_replication import (
    TOKEN,
    caught_up,
    last_index,
    primary,
    standby,
    wait_for,
)


class Follower:
    """A standby played by the test: follows ``address``'s log from index
    1 and acknowledges only what ``ack`` says (everything it receives
    while ``auto``)."""

    def __init__(self, address: str) -> None:
        self.entries: dict[int, bytes] = {}
        self.auto = True
        self.error: grpc.RpcError | None = None
        self._sends: queue.SimpleQueue[rpb.FollowRequest | None] = queue.SimpleQueue()
        self._sends.put(rpb.FollowRequest(hello=rpb.Hello(board="test", from_index=1)))
        self._channel = grpc.insecure_channel(address)
        stub = rpb_grpc.ReplicationStub(self._channel)
        self._call = stub.Follow(self._drain(), metadata=(("x-msgboard-replication-token", TOKEN),))
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _drain(self) -> Iterator[rpb.FollowRequest]:
        while (item := self._sends.get()) is not None:
            yield item

    def _read(self) -> None:
        try:
            for r in self._call:
                for e in r.entries:
                    self.entries[index_of(e)] = e
                if r.entries and self.auto:
                    self.ack(index_of(r.entries[-1]))
        except grpc.RpcError as e:
            self.error = e

    def ack(self, index: int) -> None:
        self._sends.put(rpb.FollowRequest(ack=rpb.Ack(index=index)))

    @property
    def last(self) -> int:
        return max(self.entries, default=0)

    def holding(self, body: bytes) -> int:
        """The index of the first entry received whose bytes hold ``body``."""
        for index in sorted(self.entries):
            if any(body in value for _, _, _, value in decode(self.entries[index])[2]):
                return index
        return 0

    def close(self) -> None:
        self._sends.put(None)
        self._call.cancel()
        self._channel.close()


class Call(threading.Thread):
    """One client call in a thread of its own: ``result`` or ``error``."""

    def __init__(self, address: str, fn: Any) -> None:
        super().__init__(daemon=True)
        self.address, self.fn = address, fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        with Client(self.address, timeout=90) as c:
            try:
                self.result = self.fn(c)
            except MsgboardError as e:
                self.error = e


@pytest.fixture
def follower_of() -> Iterator[list[Follower]]:
    made: list[Follower] = []
    yield made
    for f in made:
        f.close()


def waiting_takes(c: Client, name: str) -> int:
    """Takes and Reads blocked on ``name`` (-1 if the listing, held for the
    standby like any answer, did not come in time)."""
    try:
        return sum(q.waiting for q in c.list_queues() if q.spec.name == name)
    except Unavailable:
        return -1


# -- a blocked Take woken by a group that fails ----------------------------


@pytest.mark.parametrize("ending", ["timeout", "primary stops"])
def test_a_blocked_take_woken_by_a_failed_group_is_answered_unavailable(
    tmp_path: Path, stopped: list[Served], ending: str
) -> None:
    """Given a strict primary and its standby, and a Take blocked on an
    empty queue, when I pause the standby (SIGSTOP) and post a message that
    wakes the Take, I expect the post and the Take both to fail UNAVAILABLE
    once the group fails (its wait for the standby runs out, or the primary
    is stopped), the Take never to get the message; and the standby, let go
    again, to catch up."""
    p = primary(tmp_path, "--sync-timeout-ms", "5000" if ending == "timeout" else "60000")
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    with Client(p.address, timeout=90) as c:
        wait_for(lambda: _created(c, "work"), "a write answered with the standby")
        taker = Call(p.address, lambda t: t.take("work", timeout=80))
        wait_for(lambda: waiting_takes(c, "work") == 1, "the Take blocked")
        before = last_index(p.data)
        os.kill(s.proc.pid, signal.SIGSTOP)
        try:
            poster = Call(p.address, lambda t: t.post("work", body=b"wakes the take"))
            wait_for(lambda: last_index(p.data) > before, "the post committed")
            if ending == "primary stops":
                p.stop()
            poster.join(90)
            taker.join(90)
        finally:
            os.kill(s.proc.pid, signal.SIGCONT)
    assert isinstance(poster.error, Unavailable), poster.result
    assert isinstance(taker.error, Unavailable), f"the Take was answered {taker.result}"
    if ending == "timeout":
        assert "no standby in sync" in str(taker.error)
        caught_up(p, s)


def _created(c: Client, name: str) -> bool:
    try:
        c.create_queue(name)
    except Unavailable:
        return False
    return True


# -- deliveries wait for their own group -----------------------------------


def early_deliveries(
    delivered: list[bytes], acknowledged: set[bytes], wait: float = 1.0
) -> list[bytes]:
    """Bodies a consumer got (``delivered``, appended to as they come) whose
    group the standby has not acknowledged (``acknowledged``: the bodies
    whose groups it has), watched for ``wait`` seconds."""
    done = threading.Event()
    done.wait(wait)
    return [b for b in list(delivered) if b not in acknowledged]


def consume(
    address: str, name: str, ended: list[MsgboardError] | None = None
) -> tuple[list[bytes], threading.Event]:
    """A consumer of ``name`` in a thread: the bodies it receives, and an
    event set once it is subscribed; the error that ends it goes to
    ``ended``."""
    got: list[bytes] = []
    ready = threading.Event()

    def run() -> None:
        try:
            with (
                Client(address, timeout=90) as c,
                c.subscribe(name, credit=10, reconnect=False) as sub,
            ):
                ready.set()
                for d in sub:
                    got.append(d.message.body)
                    sub.ack(d)
        except MsgboardError as e:  # the group failed, or the test's end
            if ended is not None:
                ended.append(e)

    threading.Thread(target=run, daemon=True).start()
    return got, ready


def held_deliveries(p: Served, follower_of: list[Follower]) -> list[bytes]:
    """The consumer story on primary ``p``: two posts in two groups, the
    first acknowledged by the standby, the second not; the bodies the
    consumer received early."""
    f = Follower(p.address)
    follower_of.append(f)
    with Client(p.address, timeout=90) as c:
        c.create_queue("jobs")
        got, ready = consume(p.address, "jobs")
        assert ready.wait(60)
        f.auto = False
        first = Call(p.address, lambda t: t.post("jobs", body=b"first"))
        wait_for(lambda: f.holding(b"first") > 0, "the first group shipped")
        second = Call(p.address, lambda t: t.post("jobs", body=b"second"))
        wait_for(lambda: f.holding(b"second") > 0, "the second group shipped")
        f.ack(f.holding(b"first"))
        wait_for(lambda: b"first" in got, "the first message delivered")
        early = early_deliveries(got, {b"first"})
        f.ack(f.last)
        wait_for(lambda: b"second" in got, "the second message delivered")
        first.join(90)
        second.join(90)
        assert first.error is None and second.error is None
    return early


def test_a_consumer_gets_a_message_only_once_its_group_is_on_the_standby(
    tmp_path: Path, stopped: list[Served], follower_of: list[Follower]
) -> None:
    """Given a primary whose standby acknowledges the first of two posts'
    groups and not yet the second, I expect its consumer to get the first
    message and not the second until the standby has it."""
    p = primary(tmp_path, "--sync-timeout-ms", "60000")
    stopped.append(p)
    assert held_deliveries(p, follower_of) == []


def test_the_consumer_check_catches_a_primary_that_does_not_wait(
    tmp_path: Path, stopped: list[Served], follower_of: list[Follower]
) -> None:
    """The mutation: the same story on a primary with the gate off
    (``--sync-standbys 0``) shows the second message delivered early."""
    p = primary(tmp_path, "--sync-standbys", "0")
    stopped.append(p)
    assert held_deliveries(p, follower_of) == [b"second"]


def test_a_consumer_of_a_failed_group_gets_an_error_not_its_message(
    tmp_path: Path, stopped: list[Served], follower_of: list[Follower]
) -> None:
    """Given a strict primary (a 5 s wait) whose standby (played by the
    test) stops acknowledging, and a consumer, when a post's group fails to
    reach the standby, I expect the post to fail UNAVAILABLE and the
    consumer's subscription to end with that error, never delivering the
    message; and the message, once the standby acknowledges again, to be
    waiting on its queue (it came back)."""
    p = primary(tmp_path, "--sync-timeout-ms", "5000")
    stopped.append(p)
    f = Follower(p.address)
    follower_of.append(f)
    with Client(p.address, timeout=90) as c:
        wait_for(lambda: _created(c, "jobs"), "a write answered with the standby")
        ended: list[MsgboardError] = []
        got, ready = consume(p.address, "jobs", ended)
        assert ready.wait(60)
        f.auto = False
        with pytest.raises(Unavailable, match="no standby in sync"):
            c.post("jobs", body=b"failed group")
        wait_for(lambda: bool(ended), "the subscription ended")
        assert got == []
        assert isinstance(ended[0], Unavailable) and "no standby in sync" in str(ended[0])
        f.auto = True
        f.ack(f.last)

        def back() -> bool:
            try:
                page = c.browse("jobs", limit=10, section="unprocessed")
            except Unavailable:
                return False
            return [m.body for m in page.messages] == [b"failed group"]

        wait_for(back, "the message waiting again")
