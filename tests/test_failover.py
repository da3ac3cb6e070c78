"""Clients that follow the primary, told with real boards on loopback: a
primary (``--replication-token``) and a standby (``--standby-of``) as
``msgboard serve`` processes, and a failover done by hand (kill -9 the
primary, stop the standby, start a board on the standby's directory and
port), as docs/replication.md tells an operator to.

The stories: a client given [standby, primary] lands on the primary; one
given [a dead address, primary] skips the dead one; a client posting
throughout a failover loses no answered post and stores none twice (its
posts carry keys); a subscription resumes on the new primary, where its
unacked delivery comes again and its acked ones do not; an ack of a lease
of the old primary is rejected, never reported acked; a post whose answer
was lost is stored once, and a take or ack whose answer was lost is not
sent again; the CLI takes a list in --server and in MSGBOARD_SERVER.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from msgboard.client import Client, Delivery, Disposition, Message
from msgboard.client.failover import Failover, addresses_of, refused
from msgboard.errors import (
    InvalidArgument,
    NotFound,
    NotPrimary,
    Unavailable,
    from_wire,
)
from msgboard.testing import ServerThread
from msgboard.tls import Connection
from tests.proxy import Proxy
from tests.served import Served, free_port
from tests.test_replication import PATIENT, primary, standby, violations, wait_for, waiting

#: A failover by hand on a loaded machine takes seconds; the clients wait longer.
FAILOVER = 120.0


# -- where a client goes ----------------------------------------------------


def test_addresses_are_a_comma_list_a_list_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert addresses_of("a:1, b:2,c:3") == ["a:1", "b:2", "c:3"]
    assert addresses_of(["a:1", "b:2"]) == ["a:1", "b:2"]
    monkeypatch.setenv("MSGBOARD_SERVER", "x:1,y:2")
    assert addresses_of(None) == ["x:1", "y:2"]
    monkeypatch.delenv("MSGBOARD_SERVER")
    assert addresses_of(None) == ["127.0.0.1:7878"]
    with pytest.raises(InvalidArgument, match="an empty address"):
        addresses_of("a:1,,b:2")
    with pytest.raises(InvalidArgument, match="below 0"):
        Failover(Connection("a:1"), ["a:1"], -1)


def test_what_counts_as_refused_before_it_ran() -> None:
    """NotPrimary, NoLease (by its wire reason, whether or not this client
    knows the class) and no connection are refusals; a connection broken
    during the call, or a write not yet on a standby, are not."""
    assert refused(from_wire("UNAVAILABLE", "standby", "NotPrimary", {"primary": "p:1"}))
    lease = from_wire("UNAVAILABLE", "not sure of its lease", "NoLease", {})
    lease.reason = "NoLease"  # as msgboard.client.wire sets it from the ErrorInfo
    assert refused(lease)
    assert refused(Unavailable("failed to connect to all addresses; last error: refused"))
    assert not refused(Unavailable("Socket closed"))
    assert not refused(Unavailable("no standby in sync within 1500 ms"))


def test_moves_go_to_the_named_primary_or_the_next_address() -> None:
    f = Failover(Connection("s:1"), ["s:1", "p:2", "q:3"])
    assert f.seconds == 30.0
    assert f.moved("s:1", NotPrimary("p:2")) is True and f.address == "p:2"
    assert f.moved("p:2", Unavailable("failed to connect to all addresses")) is False
    assert f.address == "q:3"
    assert f.moved("q:3", Unavailable("Socket closed")) is False and f.address == "q:3"
    assert f.moved("q:3", NotPrimary("elsewhere:9")) is True and f.address == "elsewhere:9"
    # From an address not in the list, "the next" counts from the last listed one.
    assert f.moved("elsewhere:9", Unavailable("failed to connect to all addresses")) is False
    assert f.address == "s:1"
    # A standby that knows of no primary names none: the next address.
    assert f.moved("s:1", NotPrimary()) is False and f.address == "p:2"
    assert refused(from_wire("UNAVAILABLE", "knows of no primary", "NotPrimary", {"primary": ""}))
    off = Failover(Connection("s:1"), ["s:1"])
    assert off.seconds == 0 and off.moved("s:1", NotPrimary("p:2")) is False
    assert off.address == "s:1"


def test_a_client_given_the_standby_first_lands_on_the_primary(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary and its standby, a client given [standby, primary]
    (or only the standby, with failover on) posts, reads, publishes and
    subscribes (blocking and asyncio) on the primary; with one address and
    failover off it gets NotPrimary."""
    p = primary(tmp_path, *PATIENT)
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    with Client([s.address, p.address]) as c:
        c.create_queue("jobs")
        assert c.address == p.address
        seq = c.post("jobs", ("job", 1))
        [m] = c.read("jobs")
        assert (m.seq, m.tuple) == (seq, ("job", 1))
        assert m.key  # keyed by the client, so that it may be sent again
    with Client([s.address, p.address]) as c, c.publisher() as pub:
        assert pub.idempotent  # on with failover: its batches are keyed
        assert pub.post("jobs", ("job", 2)) == seq + 1
    with Client([s.address, p.address]) as c:

        async def first() -> int:
            async with c.subscribe_async("jobs", credit=1) as sub:
                async for d in sub:
                    await sub.ack(d)
                    return d.message.seq
            raise AssertionError("the subscription ended")

        assert asyncio.run(first()) == seq
    with Client(s.address, failover=10) as c, c.subscribe("jobs", credit=1) as sub:
        assert c.address == p.address
        d = next(sub)
        assert d.message.tuple == ("job", 2)
        sub.ack(d)
    # A take and an ack refused by the standby ran nowhere: sent to the primary.
    with Client([s.address, p.address]) as c:
        c.post("jobs", ("job", 3))
    with Client([s.address, p.address]) as c:
        [lease] = c.take_leased("jobs", lease=600)
        assert lease.message.tuple == ("job", 3)
    with Client([s.address, p.address]) as c:
        assert c.ack("jobs", [lease]).ids == [lease.id]
    with Client(s.address) as c, pytest.raises(NotPrimary):
        c.stats()


def test_a_client_gives_up_after_the_failover_deadline() -> None:
    """With no board at any address, a call is tried again until the
    deadline, then raises the last error (here: no connection)."""
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    with Client(dead, failover=1.0) as c, pytest.raises(Unavailable) as e:
        c.stats()
    assert refused(e.value)


def test_a_client_skips_an_address_where_nothing_listens(server: ServerThread) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with Client(f"{dead},{server.address}") as c:
        c.create_queue("q")
        assert c.post("q", body=b"x") == 1
        assert c.address == server.address
        assert [m.body for m in c.take("q")] == [b"x"]
    with Client([dead, server.address]) as c:
        c.wait_ready(60)  # any board that answers
        assert c.address == server.address
    with Client([dead, server.address]) as c:
        # post_many's first batch goes as a unary Post (keyed, sent again),
        # the rest streams on the board it found.
        assert c.address == dead  # a fresh client starts at the first address
        seqs = c.post_many("q", [(i,) for i in range(5)], batch=2)
        assert seqs == [2, 3, 4, 5, 6] and c.address == server.address
        page = c.browse("q", limit=10)
        assert [bool(m.key) for m in page.messages] == [True, True, False, False, False]


# -- answers lost on their way ----------------------------------------------


def _lost_answer(server: ServerThread, call: str) -> tuple[Client, Proxy, threading.Thread, list]:
    """A client of [proxy, board] whose ``call`` runs on the board while
    the proxy drops the answer; returns once the board has run it (the
    caller then closes the proxy: the call's connection is reset)."""
    proxy = Proxy(server.address)
    c = Client([proxy.address, server.address], failover=30)
    c.create_queue("q")
    out: list = []

    def run() -> None:
        try:
            out.append(getattr(c, call[0])(*call[1:]))
        except Exception as e:  # the test looks at it
            out.append(e)

    proxy.mute()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return c, proxy, t, out


def test_a_post_whose_answer_was_lost_is_stored_once(server: ServerThread) -> None:
    """Given a client of [proxy, board], when the board stores a post and
    its answer is lost (the proxy drops it, then resets the connection), I
    expect the client to send it again to the board (its key), and the
    board to hold it once, under the seq the client was told."""
    c, proxy, t, out = _lost_answer(
        server, ("post_receipts", "q", [Message(tuple=("once",)), Message(key="k")])
    )
    with Client(server.address) as direct:
        wait_for(lambda: direct.get_queue("q").unprocessed == 2, "the post stored")
        proxy.close()
        t.join(60)
        [receipts] = out
        # Its own key's duplicate is its first attempt, stored; the
        # caller's key is reported as the board says.
        assert isinstance(receipts, list), receipts
        assert [r.disposition for r in receipts] == [Disposition.STORED, Disposition.DUPLICATE]
        page = direct.browse("q")
        assert [(m.seq, m.tuple) for m in page.messages] == [
            (receipts[0].seq, ("once",)),
            (receipts[1].seq, ()),
        ]
    c.close()


def test_a_take_or_ack_whose_answer_was_lost_is_not_sent_again(server: ServerThread) -> None:
    """A take that ran and lost its answer is reported UNAVAILABLE, not
    run again (a second take would take a second message); so is an ack
    (sent again, it would be rejected NotFound: reported as done it would
    lie)."""
    with Client(server.address) as direct:
        direct.create_queue("q")
        direct.post_many("q", [("a",), ("b",)])
        c, proxy, t, out = _lost_answer(server, ("take", "q"))
        wait_for(lambda: direct.get_queue("q").unprocessed == 1, "the take ran")
        proxy.close()
        t.join(60)
        assert isinstance(out[0], Unavailable) and not refused(out[0])
        assert [m.tuple for m in direct.read("q", max=10)] == [("b",)]  # not taken twice
        c.close()
        [lease] = direct.take_leased("q", lease=300)
        assert direct.stats("q").queues[0].outstanding == 1
        c, proxy, t, out = _lost_answer(server, ("ack", "q", [lease]))
        wait_for(lambda: direct.stats("q").queues[0].outstanding == 0, "the ack ran")
        proxy.close()
        t.join(60)
        assert isinstance(out[0], Unavailable)
        c.close()


# -- a failover by hand -----------------------------------------------------


class Poster(threading.Thread):
    """Posts to ``queue`` through a failover client (one unary Post each,
    or its ``publisher``) until told to stop; ``answered``: the bodies
    answered OK, ``failed``: errors."""

    def __init__(self, addresses: list[str], queue: str, *, publisher: bool = False) -> None:
        super().__init__(daemon=True)
        self.addresses, self.queue, self.publisher = addresses, queue, publisher
        self.answered: list[bytes] = []
        self.failed: list[Exception] = []
        self.stop = threading.Event()
        self.start()

    def run(self) -> None:
        with Client(self.addresses, timeout=30, failover=FAILOVER) as c:
            poster = c.publisher(retry_for=FAILOVER) if self.publisher else c
            i = 0
            while not self.stop.is_set():
                body = f"{self.queue}-{i}".encode()
                try:
                    poster.post(self.queue, body=body)
                except Exception as e:  # the test reports it
                    self.failed.append(e)
                    return
                self.answered.append(body)
                i += 1


class Consumer(threading.Thread):
    """Iterates a subscription, acking every delivery but those whose body
    is in ``keep``; ``got``: every body delivered, in order."""

    def __init__(self, sub: object, keep: set[bytes]) -> None:
        super().__init__(daemon=True)
        self.sub, self.keep = sub, keep
        self.got: list[bytes] = []
        self.error: Exception | None = None
        self.start()

    def run(self) -> None:
        try:
            for d in self.sub:  # type: ignore[attr-defined]
                assert isinstance(d, Delivery)
                self.got.append(d.message.body)
                if d.message.body not in self.keep:
                    self.sub.ack(d)  # type: ignore[attr-defined]
        except Exception as e:  # the test reports it
            self.error = e


def test_a_failover_by_hand_loses_no_answered_post_and_doubles_none(
    tmp_path: Path, stopped: list[Served]
) -> None:
    """Given a primary and its standby, clients posting throughout through
    [standby, primary] (unary posts, and a publisher's stream), a
    subscriber and a leased take, when I kill -9 the
    primary, stop the standby and start a board on the standby's directory
    and port, I expect: every post answered OK waiting exactly once on the
    new board (none lost, none doubled), no post failed; the subscription
    back on the new board, its unacked delivery delivered again and its
    acked one not; the old lease's ack rejected, never reported acked."""
    p = primary(tmp_path, *PATIENT)
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)
    port = int(s.address.rsplit(":", 1)[1])
    addresses = [s.address, p.address]
    c = Client(addresses, timeout=30, failover=FAILOVER)
    try:
        for q in ("jobs", "streamed", "feed", "leases"):
            c.create_queue(q)
        c.post("leases", body=b"leased")
        [lease] = c.take_leased("leases", lease=600)
        sub = c.subscribe("feed", credit=10)
        consumer = Consumer(sub, keep={b"unacked"})
        c.post("feed", body=b"acked")
        c.post("feed", body=b"unacked")
        wait_for(lambda: consumer.got == [b"acked", b"unacked"], "both delivered")
        wait_for(lambda: len(sub.acked) == 1, "the first one's ack applied")
        poster = Poster(addresses, "jobs")
        streamed = Poster(addresses, "streamed", publisher=True)
        wait_for(
            lambda: len(poster.answered) >= 20 and len(streamed.answered) >= 20,
            "posts answered before the kill",
        )

        p.kill()
        s.stop()
        (tmp_path / "s" / "ready.json").unlink(missing_ok=True)
        board = Served(tmp_path / "s", "--listen", f"127.0.0.1:{port}")
        stopped.append(board)
        assert board.address == s.address

        for posting in (poster, streamed):
            after = len(posting.answered)
            wait_for(
                lambda p=posting, n=after: len(p.answered) >= n + 20 or bool(p.failed),
                "posts resume",
            )
            posting.stop.set()
            posting.join(60)
            assert posting.failed == []
        c.post("feed", body=b"after")
        wait_for(
            lambda: consumer.got[-2:] in ([b"unacked", b"after"], [b"after", b"unacked"]),
            "the subscription resumed",
            120,
        )
        assert consumer.got.count(b"acked") == 1 and consumer.error is None
        acked = c.ack("leases", [lease])
        # Rejected, never acked: the new board has no such lease (NotFound),
        # or has not given that id yet (InvalidArgument "never given").
        assert acked.ids == []
        assert isinstance(acked.rejected[lease.id], NotFound | InvalidArgument)
        sub.end()  # the consumer's thread reads the stream to its end
        consumer.join(60)
        assert not consumer.is_alive()
        sub.close()
    finally:
        c.close()
    with Client(board.address) as direct:
        answered = dict.fromkeys(poster.answered, "jobs")
        answered.update(dict.fromkeys(streamed.answered, "streamed"))
        assert violations(waiting(direct, ["jobs", "streamed"]), answered, set()) == []
        assert [m.body for m in direct.read("leases", max=5)] == [b"leased"]


# -- the command line -------------------------------------------------------


def test_the_cli_takes_a_list_in_server_and_in_msgboard_server(
    tmp_path: Path, stopped: list[Served]
) -> None:
    p = primary(tmp_path, *PATIENT)
    stopped.append(p)
    s = standby(tmp_path, p)
    stopped.append(s)

    def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "msgboard", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
        )

    done = cli("queue", "create", "q", "--server", f"{s.address},{p.address}")
    assert done.returncode == 0, done.stderr
    done = cli("post", "q", "--body", "one", "--server", f"{s.address},{p.address}")
    assert done.returncode == 0, done.stderr
    done = cli("post", "q", "--body", "two", MSGBOARD_SERVER=f"{s.address},{p.address}")
    assert done.returncode == 0, done.stderr
    done = cli("post", "q", "--body", "three", "--server", s.address)
    assert done.returncode == 1 and "standby" in done.stderr
    done = cli("post", "q", "--body", "three", "--server", s.address, "--failover", "10")
    assert done.returncode == 0, done.stderr
    with Client(p.address) as c:
        assert [m.body for m in c.read("q", max=5)] == [b"one", b"two", b"three"]


def test_a_client_s_backoff_leaves_the_application_s_random_state_alone() -> None:
    """Given the pauses a client takes between failover attempts and between
    a subscription's reconnections, I expect the application's global random
    state untouched: client threads draw jitter at any time, and an
    application (or a property-based test) that seeds ``random`` must get
    the same draws with or without a client running beside it."""
    import random

    from msgboard.client import failover, subscription

    random.seed(7)
    before = random.getstate()
    pauses = [failover.pause(3), subscription.backoff(2)]
    assert random.getstate() == before
    assert pauses[0] > 0 and pauses[1] > 0
