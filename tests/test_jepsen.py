"""The fault tests' checker (tests/jepsen.py), shown each violation it looks
for, in a history made by hand, and a clean history passing: a checker
that cannot fail would pass every fault test."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from msgboard.client import Client, Subscription
from msgboard.engine import Board
from msgboard.message import Message
from msgboard.spec import QueueSpec
from tests import damage
from tests.faults import wait_for
from tests.jepsen import Dump, Stored, check, dump
from tests.served import Served
from tests.workload import FAIL, OK, QUEUES, UNKNOWN, History, Op, Workload, prepare


def post(key: str, at: float, done: float, outcome: str = OK, queue: str = "q") -> Op:
    return Op("poster", "post", key, queue, at, done, outcome)


def deliver(key: str, at: float, done: float, who: str = "consumer") -> Op:
    return Op(who, "deliver", key, "q", at, done, OK)


def ack(key: str, at: float, done: float, outcome: str = OK) -> Op:
    return Op("consumer", "ack", key, "q", at, done, outcome)


def take(key: str, at: float, done: float) -> Op:
    return Op("taker", "take", key, "q", at, done, OK)


def blind(at: float, done: float) -> Op:
    return Op("taker", "blind", "", "q", at, done, UNKNOWN)


#: Given: a posted (1-2), b posted (3-4), both delivered in order and
#: acked, c posted and taken, d posted, answer lost, stored, waiting;
#: e refused by a standby, not stored.
CLEAN = [
    post("a", 1, 2),
    post("b", 3, 4),
    deliver("a", 4.5, 5),
    ack("a", 5, 6),
    deliver("b", 6, 7),
    ack("b", 7, 8),
    post("c", 8, 9),
    take("c", 9, 10),
    post("d", 10, 11, UNKNOWN),
    post("e", 11, 12, FAIL),
]
STORED = [
    Stored("a", "q", 1, "history"),
    Stored("b", "q", 2, "history"),
    Stored("c", "q", 3, "history"),
    Stored("d", "q", 4, "unprocessed"),
]


def final(messages: list[Stored] = STORED) -> Dump:
    return Dump(None, list(messages))


def test_a_clean_history_passes() -> None:
    assert check(CLEAN, final()) == []


def test_a_lost_write_is_caught() -> None:
    # When the final primary lacks b, whose post was answered OK
    found = check(CLEAN, final([m for m in STORED if m.key != "b"]))
    assert found == [
        "lost: b posted to q by poster, answered OK at 4.000, is not on the final primary"
    ]
    # A post whose answer was lost (d) may be missing.
    assert check(CLEAN, final([m for m in STORED if m.key != "d"])) == []


def test_a_duplicate_is_caught() -> None:
    found = check(CLEAN, final([*STORED, Stored("d", "q", 5, "unprocessed")]))
    assert found == ["duplicate: d stored 2 times: q#4 (unprocessed), q#5 (unprocessed)"]


def test_a_delivery_after_an_ack_is_caught() -> None:
    # When a is delivered again after its ack was answered (at 6)
    found = check([*CLEAN, deliver("a", 8, 8.5, "another")], final())
    assert found == [
        "redelivered: a delivered to another from 8.000, after consumer's ack of it was"
        " answered OK at 6.000"
    ]
    # ... and after a take: c was taken at 10
    found = check([*CLEAN, deliver("c", 11, 12)], final())
    assert found == [
        "redelivered: c delivered to consumer from 11.000, after taker's ack of it was"
        " answered OK at 10.000"
    ]
    # A delivery that may have begun before the ack was answered is no violation.
    assert check([*CLEAN, deliver("a", 5.5, 9, "another")], final()) == []
    # An ack that failed or whose answer was lost proves nothing.
    history = [*CLEAN[:3], ack("a", 5, 6, UNKNOWN), *CLEAN[4:], deliver("a", 9, 9.5)]
    assert check(history, final()) == []


def test_an_acked_message_waiting_again_is_caught() -> None:
    stored = [Stored("a", "q", 1, "unprocessed"), *STORED[1:]]
    assert check(CLEAN, final(stored)) == [
        "redelivered: a was acked OK by consumer at 6.000 and waits again on q (seq 1)"
    ]


def test_first_deliveries_out_of_posting_order_are_caught() -> None:
    # When b (posted after a was answered) is delivered before a
    history = [
        post("a", 1, 2),
        post("b", 3, 4),
        deliver("b", 4.5, 5),
        deliver("a", 6, 7, "another"),
    ]
    stored = [Stored("a", "q", 1, "unprocessed"), Stored("b", "q", 2, "unprocessed")]
    assert check(history, final(stored)) == [
        "FIFO: on q, a was answered before b was posted, yet b was delivered by 5.000,"
        " before a's first delivery began (6.000)"
    ]
    # ... or while a is never delivered and still waits
    assert check(history[:3], final(stored)) == [
        "FIFO: on q, a was answered before b was posted, yet b was delivered by 5.000,"
        " before a's first delivery (it waits still)"
    ]
    # Concurrent posts have no order: b was first tried before a's answer.
    concurrent = [post("a", 1, 3), post("b", 2, 4), *history[2:]]
    assert check(concurrent, final(stored)) == []
    # A retried post counts from its first try.
    retried = [post("a", 1, 3), post("b", 2, 2.5, UNKNOWN), *history[1:]]
    assert check(retried, final(stored)) == []
    # A take whose answer was lost may have delivered a unseen before b.
    assert check([*history, blind(4, 4.4)], final(stored)) == []
    # ... but not one that ended before a was posted.
    assert len(check([*history, blind(0.2, 0.5)], final(stored))) == 1


def test_a_subscribers_first_delivery_counts_from_its_subscribe_call() -> None:
    # The workload bounds a stream's first delivery by its subscribe call
    # (2.5): the board may push a to the stream before subscribe returns.
    history = [
        post("a", 1, 2),
        post("b", 3, 4),
        take("b", 4.5, 5),
        deliver("a", 2.5, 6, "subscriber"),
    ]
    stored = [Stored("a", "q", 1, "history"), Stored("b", "q", 2, "history")]
    assert check(history, final(stored)) == []
    # A subscribe called after b was taken cannot have had a first: caught.
    late = [*history[:3], deliver("a", 5.5, 6, "subscriber")]
    assert check(late, final(stored)) == [
        "FIFO: on q, a was answered before b was posted, yet b was delivered by 5.000,"
        " before a's first delivery began (5.500)"
    ]


def test_the_workloads_first_delivery_bound_holds_when_subscribe_returns_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loaded machine may run the subscriber's thread long after the
    board sent it its first delivery: the history must still be clean
    (the checker once reported FIFO at the start of a fault test)."""
    subscribe = Client.subscribe

    def late(self: Client, *args: Any, **kw: Any) -> Subscription:
        sub = subscribe(self, *args, **kw)
        time.sleep(0.5)  # descheduled once the stream is open
        return sub

    monkeypatch.setattr(Client, "subscribe", late)
    board = Served(tmp_path)
    try:
        prepare(board.address)
        h = History()
        w = Workload(h, board.address).start()
        wait_for(
            lambda: h.count("deliver") >= 20 and h.count("take") >= 20,
            "deliveries to the subscriber and takes",
        )
        w.stop()
        assert check(h.ops(), dump(board.address, None, QUEUES)) == []
    finally:
        board.stop()


def test_seqs_out_of_posting_order_are_caught() -> None:
    history = [post("a", 1, 2), post("b", 3, 4)]
    stored = [Stored("a", "q", 2, "unprocessed"), Stored("b", "q", 1, "unprocessed")]
    assert check(history, final(stored)) == [
        "FIFO: on q, a (seq 2) was answered before b was posted, yet b has the lower seq 1"
    ]


def _board(path: Path) -> None:
    with Board(path) as b:
        b.create_queue(QueueSpec("q"))
        b.post("q", [Message(body=b"BODY-%03d" % i, key=f"k{i}") for i in range(20)])


def test_a_standby_that_differs_or_is_damaged_is_caught(tmp_path: Path) -> None:
    # Given a primary's directory and a standby's copy of it
    primary, standby = tmp_path / "primary", tmp_path / "standby"
    _board(primary)
    shutil.copytree(primary, standby)
    assert check([], Dump(primary), [standby]) == []
    # When one byte of the standby's copy goes bad
    damage.flip(standby, b"BODY-007")
    found = check([], Dump(primary), [standby])
    # I expect the comparison to name the record, and the check to fail.
    assert any(line.startswith("diverged: standby standby: unprocessed: key") for line in found)
    assert any(line.startswith("diverged: msgboard check standby is not clean") for line in found)


def test_a_standby_whose_check_fails_is_caught_even_when_equal(tmp_path: Path) -> None:
    # Given a primary and its standby, damaged alike (the comparison sees
    # nothing: the two hold the same bytes)
    primary, standby = tmp_path / "primary", tmp_path / "standby"
    _board(primary)
    damage.flip(primary, b"BODY-003")
    shutil.copytree(primary, standby)
    found = check([], Dump(primary), [standby])
    assert len(found) == 1
    assert found[0].startswith("diverged: msgboard check standby is not clean")
