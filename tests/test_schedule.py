"""Scheduled messages: a message posted with a ``not_before`` still to come
is stored at once (its seq answered when durable), unseen by takes, reads,
selectors and subscribers, and routed at its time as if it had just
arrived, keeping its seq.

The store contract on both backends with explicit times; the engine on a
real LMDB directory (restart, selectors, 10^5 due in one second with a post
between the release steps); the wire through a real server."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msgboard.associative import EVERYTHING
from msgboard.cli.main import main
from msgboard.client import Client
from msgboard.engine import Board, pulling, releases
from msgboard.errors import InvalidArgument
from msgboard.lmdbstore import DurableStore, MemoryStore
from msgboard.lmdbstore.check import check
from msgboard.lmdbstore.layout import QID, SCHEDULED, U64
from msgboard.lmdbstore.store import Store
from msgboard.message import Message, Section, now_us
from msgboard.server.metrics import gauges
from msgboard.spec import Op, OverflowPolicy, Position, QueueSpec, SelectorSpec
from msgboard.testing import ServerThread
from tests import damage

S = 1_000_000


def wait_for(what: str, cond: object, seconds: float = 60.0) -> None:
    """Waits until ``cond()`` is true, with a generous deadline."""
    deadline = time.monotonic() + seconds
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {seconds} s: {what}")
        time.sleep(0.05)


@pytest.fixture(params=["lmdb", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = DurableStore(tmp_path / "board") if request.param == "lmdb" else MemoryStore()
    with s.begin() as txn:
        txn.create_queue(QueueSpec("q"), 0)
    try:
        yield s
    finally:
        s.close()


def test_a_scheduled_message_is_kept_apart_until_released(store: Store) -> None:
    """Given a message scheduled for t=100 and one posted plainly, I expect
    the scheduled one to take seq 1 but stay out of the waiting section, to
    be listed as due only from t=100, and released under seq 1."""
    with store.begin() as txn:
        m = txn.schedule("q", Message(body=b"later", not_before=100), now=1)
        txn.append("q", Message(body=b"now"), now=1)
        assert (m.seq, m.section) == (1, Section.SCHEDULED)
        assert [x.body for x in txn.scan("q", Section.UNPROCESSED)] == [b"now"]
        assert [x.body for x in txn.find("q", EVERYTHING)] == [b"now"]
        assert [(x.seq, x.section) for x in txn.scan("q")] == [
            (1, Section.SCHEDULED),
            (2, Section.UNPROCESSED),
        ]
        c = txn.counts("q")
        assert (c.unprocessed, c.scheduled, c.next_seq) == (1, 1, 3)
    with store.begin() as txn:
        assert txn.next_due() == 100
        assert txn.due(99, 10) == ([], 100)
        assert txn.due(100, 10) == ([("q", 1, 100)], 0)
        released = txn.release("q", 1, 100)
        assert released is not None and released.section is Section.UNPROCESSED
        assert [x.seq for x in txn.find("q", EVERYTHING)] == [1, 2]
        assert txn.counts("q").scheduled == 0 and txn.next_due() == 0
        assert txn.release("q", 1, 100) is None  # once


class Counting(dict[str, object]):
    """A queue cache that counts the entries read through ``items``."""

    read = 0

    def items(self) -> Iterator[tuple[str, object]]:  # type: ignore[override]
        for kv in super().items():
            self.read += 1
            yield kv


def test_due_names_only_the_queues_found(tmp_path: Path) -> None:
    """Given 50 queues and one message scheduled on the first, I expect due()
    to read no queue when nothing is due, and fewer than all 50 to name the
    one found (it had mapped every queue on each run)."""
    s = DurableStore(tmp_path / "board")
    try:
        with s.begin() as txn:
            for i in range(50):
                txn.create_queue(QueueSpec(f"q{i:03}"), 0)
            txn.schedule("q000", Message(not_before=10 * S), now=0)
            txn.schedule("q000", Message(not_before=100 * S), now=0)
        with s.begin() as txn:
            cache = Counting(txn._base)  # type: ignore[attr-defined]
            txn._base = cache  # type: ignore[attr-defined]
            assert txn.due(5 * S, 10) == ([], 10 * S)
            assert cache.read == 0
            assert txn.due(50 * S, 10) == ([("q000", 1, 10 * S)], 100 * S)
            assert 0 < cache.read < 50
            txn.abort()
    finally:
        s.close()


def test_release_is_bounded_and_an_abort_leaves_it_scheduled(store: Store) -> None:
    """Given three messages due at once, I expect due() to list at most its
    budget, in seq order, and a release rolled back to leave it scheduled."""
    with store.begin() as txn:
        for i in range(3):
            txn.schedule("q", Message(body=bytes([i]), not_before=50), now=1)
    with store.begin() as txn:
        assert txn.due(60, 2) == ([("q", 1, 50), ("q", 2, 50)], 60)
    txn = store.begin()
    txn.release("q", 1, 50)
    txn.abort()
    with store.begin() as txn:
        assert txn.counts("q").scheduled == 3 and txn.due(60, 9)[0][0] == ("q", 1, 50)


def test_a_scheduled_message_is_unseen_then_routed_keeping_its_seq(board: Board) -> None:
    """Given a MOVE selector from "in" to "out", when I post a message due in
    a second and another now, I expect the first invisible (Stats counts it
    scheduled, Browse shows it with its time) and then moved to "out" as if
    it had just arrived, still seq 1 on "in"."""
    board.create_queue(QueueSpec("in", max_history=10))
    board.create_queue(QueueSpec("out"))
    at = now_us() + S
    assert board.post("in", [Message(body=b"later", not_before=at), Message(body=b"now")]) == [
        1,
        2,
    ]
    [st] = board.stats("in").queues
    assert (st.unprocessed, st.scheduled) == (1, 1)
    [family] = [f for f in gauges(board.stats()) if f.name == "msgboard_queue_messages_scheduled"]
    assert [(s.labels["queue"], s.value) for s in family.samples] == [("in", 1), ("out", 0)]
    page = board.browse("in", section=Section.SCHEDULED)
    assert [(m.seq, m.not_before) for m in page.messages] == [(1, at)]
    board.create_selector(SelectorSpec(source="in", destination="out", op=Op.MOVE))
    assert [m.body for m in board.read("out", max=10)] == [b"now"]
    wait_for("the release", lambda: len(board.read("out", max=10)) == 2)
    assert now_us() >= at
    assert [m.body for m in board.read("out", max=10)] == [b"now", b"later"]
    history = board.browse("in", section=Section.HISTORY).messages
    assert [(m.seq, m.body) for m in history] == [(2, b"now"), (1, b"later")] or [
        (m.seq, m.body) for m in history
    ] == [(1, b"later"), (2, b"now")]
    assert board.stats("in").queues[0].scheduled == 0


def test_a_release_into_a_full_queue_takes_its_overflow_path(board: Board) -> None:
    """Given queues of max_unprocessed 2 (reject with a dead-letter queue,
    drop-new, and reject with nowhere to put more), when ten, four and five
    messages due in a second are posted to them, I expect each to hold two
    once released: the rest dead-lettered (reason overflow), dropped, or
    kept scheduled and released as room is made."""
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("full", max_unprocessed=2, dead_letter="dlq"))
    board.create_queue(QueueSpec("drop", max_unprocessed=2, overflow=OverflowPolicy.DROP_NEW))
    board.create_queue(QueueSpec("keep", max_unprocessed=2))
    at = now_us() + S
    for name, n in (("full", 10), ("drop", 4), ("keep", 5)):
        board.post(name, [Message(tuple=(name, i), not_before=at) for i in range(n)])

    def counts(name: str) -> tuple[int, int]:
        [st] = board.stats(name).queues
        return st.unprocessed, st.scheduled

    wait_for("the releases", lambda: counts("dlq")[0] == 8 and counts("keep")[0] == 2)
    assert counts("full") == (2, 0) and counts("drop") == (2, 0)
    assert counts("keep") == (2, 3)  # released in one step with the rest
    dead = board.read("dlq", max=10)
    assert {m.headers["x-dead-letter-reason"] for m in dead} == {"overflow"}
    assert sorted(int(m.headers["x-dead-letter-seq"]) for m in dead) == list(range(3, 11))
    assert [m.tuple for m in board.take("keep", max=2)] == [("keep", 0), ("keep", 1)]
    wait_for("a retry", lambda: counts("keep") == (2, 1))
    assert [m.seq for m in board.read("keep", max=5)] == [3, 4]


def test_a_release_moved_by_an_overflow_selector_names_where_it_went(board: Board) -> None:
    """Given a full queue with an overflow selector to another queue, when
    a scheduled message is released into it, I expect its history record
    to say moved, reason overflow, by that selector, to that queue and the
    seq it has there (issue 41: a message is followed across a move)."""
    from msgboard.message import ExitKind
    from msgboard.spec import Role

    board.create_queue(QueueSpec("spill"))
    board.post("spill", [Message(tuple=("already",))])  # spill's seqs are not full's
    board.create_queue(QueueSpec("full", max_unprocessed=1, max_history=10))
    s = board.create_selector(SelectorSpec("full", destination="spill", role=Role.OVERFLOW))
    board.post("full", [Message(tuple=("waits",))])
    board.post("full", [Message(tuple=("later",), not_before=now_us() + S // 2)])
    wait_for("the release", lambda: board.stats("spill").queues[0].unprocessed == 2)
    [left] = board.browse("full", section=Section.HISTORY).messages
    assert left.exit is not None
    how = left.exit
    assert (how.kind, how.reason, how.queue, how.selector) == (
        ExitKind.MOVED,
        "overflow",
        "spill",
        s.id,
    )
    there = {m.seq: m.tuple for m in board.browse("spill").messages}
    assert there[how.seq] == ("later",) and how.seq == 2


def test_a_release_that_keeps_failing_backs_off_and_logs_once(
    board: Board, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Given a release that fails every time (its group rolled back), with
    the first retry at 0.1 s, I expect the tries 0.1, 0.2 and 0.4 s apart
    at least (not a loop), one warning, and the message released once the
    fault is gone."""
    rel = board._releases
    monkeypatch.setattr(releases, "RETRY", 100_000)
    tries: list[float] = []
    route = rel._route

    def failing(*args: object) -> bool:
        tries.append(time.monotonic())
        raise RuntimeError("a damaged due page")

    monkeypatch.setattr(rel, "_route", failing)
    board.create_queue(QueueSpec("q"))
    with caplog.at_level(logging.WARNING, logger=releases.__name__):
        board.post("q", [Message(body=b"x", not_before=now_us() + S // 5)])
        wait_for("four failed tries", lambda: len(tries) >= 4)
        monkeypatch.setattr(rel, "_route", route)
        wait_for("the release", lambda: board.stats("q").queues[0].unprocessed == 1)
    gaps = [b - a for a, b in itertools.pairwise(tries[:4])]
    assert all(gap >= 0.1 * 2**i - 0.02 for i, gap in enumerate(gaps)), gaps
    said = [r.getMessage() for r in caplog.records if r.name == releases.__name__]
    assert len(said) == 2 and "failed" in said[0] and "again" in said[1], said


def test_scheduled_messages_survive_a_restart(tmp_path: Path) -> None:
    """Given a message scheduled on a durable queue, when the board restarts
    before its time, I expect it released after the restart, and check clean
    before and after."""
    path = tmp_path / "board"
    at = now_us() + 2 * S
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs"))
        b.post("jobs", [Message(body=b"later", not_before=at, key="k")])
    report = check(path)
    assert report.ok, list(report.lines())
    with Board(path) as b:
        assert b.post("jobs", [Message(key="k")]) == [1]  # its key is held while scheduled
        [m] = b.take("jobs", EVERYTHING, timeout=60)
        assert (m.seq, m.body) == (1, b"later") and now_us() >= at
    report = check(path)
    assert report.ok, list(report.lines())


def test_a_hundred_thousand_due_in_one_second_go_in_bounded_steps(tmp_path: Path) -> None:
    """Given 10^5 messages due in the same second, I expect all released in
    seq order, and a post made while they are being released answered
    before the release ends (it waits for a step, not for the lot)."""
    n = 100_000
    with Board(tmp_path / "board", sync=False) as b:
        b.create_queue(QueueSpec("jobs"))
        b.create_queue(QueueSpec("other"))
        # The time: three times what posting a tenth takes here, ten times.
        t = time.monotonic()
        b.post("other", [Message(not_before=now_us() + 3600 * S) for _ in range(n // 10)])
        at = now_us() + round(30 * (time.monotonic() - t) * S) + 3 * S
        futs = [
            b.post_async("jobs", [Message(not_before=at) for _ in range(10_000)])
            for _ in range(n // 10_000)
        ]
        for f in futs:
            f.result(300)
        assert now_us() < at, "posting took over three times as long as it did just before"
        wait_for("the release to start", lambda: b.stats("jobs").queues[0].unprocessed > 0, 120)
        b.post("other", [Message(body=b"between")])
        assert b.stats("jobs").queues[0].scheduled > 0, "the post waited for the whole release"
        wait_for("every release", lambda: b.stats("jobs").queues[0].unprocessed == n, 300)
        seqs = [m.seq for m in b.browse("jobs", limit=10000).messages]
        assert seqs == list(range(1, 10001))


def test_bad_times_over_the_wire(client: Client) -> None:
    """I expect not_before after 9999 and an expires_at before not_before
    to be INVALID_ARGUMENT naming the field, nothing stored."""
    client.create_queue("jobs")
    with pytest.raises(InvalidArgument) as e:
        client.post("jobs", not_before=253402300800 * S)  # 10000-01-01
    assert e.value.field == "messages[0].not_before"
    with pytest.raises(InvalidArgument) as e:
        client.post("jobs", not_before=now_us() + 60 * S, expires_at=now_us() + 30 * S)
    assert e.value.field == "messages[0].expires_at"
    assert client.get_queue("jobs").unprocessed == 0


def test_delay_through_the_client_subscriber_and_cli(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given a subscriber, when I post with a delay (client and CLI), I
    expect nothing delivered before the time, then each under its seq, and
    browse --section scheduled to show them meanwhile."""
    client.create_queue("jobs")
    t0 = now_us()
    assert client.post("jobs", ("a",), delay=1.0) == 1
    assert (
        main(["post", "jobs", "--tuple", '["b"]', "--delay", "1", "--server", server.address]) == 0
    )
    assert capsys.readouterr().out == "2\n"
    argv = ["browse", "jobs", "--section", "scheduled", "--json", "--server", server.address]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.count('"not_before"') == 2, out
    got = []
    with client.subscribe("jobs", credit=10) as sub:
        for d in sub:
            got.append((d.message.seq, d.message.tuple, d.message.not_before > 0))
            assert now_us() >= t0 + S
            sub.ack(d)
            if len(got) == 2:
                break
    assert got == [(1, ("a",), True), (2, ("b",), True)]


def test_check_catches_each_kind_of_schedule_damage(tmp_path: Path) -> None:
    """Given a clean board with a scheduled message, I expect check to
    report its due entry missing, a due entry with no record, and a wrong
    scheduled count; each alone, and clean again once put back."""
    path = tmp_path / "board"
    at = now_us() + 3600 * S
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs"))
        b.post("jobs", [Message(not_before=at)])
    assert check(path).ok
    rec = QID.pack(1) + U64.pack(1)
    cases = [
        (b"due", U64.pack(at) + rec, None, "seq 1 (scheduled) is not filed in due"),
        (b"due", U64.pack(at) + QID.pack(1) + U64.pack(9), b"", "due points at seq 9"),
        (b"state", QID.pack(1) + SCHEDULED, U64.pack(2), "its scheduled count says 2"),
    ]
    damage.caught_alone(path, cases)


def test_a_copy_replay_passes_scheduled_messages_in_bounded_steps(
    board: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given 25 messages due in 2 s, then 5 waiting, and a pull budget of
    10, when a COPY selector into "out" starts at the oldest, I expect the
    5 copied at once (its replay passes the scheduled ones 10 per operation
    and goes on), then the 25 once each when due: 30 copies, none twice."""
    monkeypatch.setattr(pulling, "PULL_BUDGET", 10)
    board.create_queue(QueueSpec("in"))
    board.create_queue(QueueSpec("out"))
    at = now_us() + 2 * S
    board.post("in", [Message(tuple=("later", i), not_before=at) for i in range(25)])
    board.post("in", [Message(tuple=("now", i)) for i in range(5)])
    board.create_selector(
        SelectorSpec(source="in", destination="out", op=Op.COPY, start=Position.HEAD)
    )
    wait_for("the waiting five", lambda: board.stats("out").queues[0].unprocessed >= 5)
    if now_us() < at:
        assert [m.tuple for m in board.read("out", max=50)] == [("now", i) for i in range(5)]
    wait_for("the release", lambda: board.stats("out").queues[0].unprocessed >= 30)
    board.post("in", [Message(tuple=("end",))])
    wait_for("the last", lambda: board.stats("out").queues[0].unprocessed >= 31)
    got = sorted(m.tuple for m in board.read("out", max=50))
    want = sorted([("end",), *(("later", i) for i in range(25)), *(("now", i) for i in range(5))])
    assert got == want


def test_a_release_of_only_kept_messages_waits_a_retry_not_a_loop(
    board: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a full queue (reject, nowhere to overflow), three messages due
    on it at once, a budget of 2 and a retry of 0.2 s, I expect the due
    ones tried a few times a second (each read finds the same two, all
    kept), not in a loop; and released once room is made."""
    monkeypatch.setattr(releases, "BUDGET", 2)
    monkeypatch.setattr(releases, "RETRY", 200_000)
    rel = board._releases
    route = rel._route
    tries: list[float] = []

    def counting(*args: Any) -> bool:
        tries.append(time.monotonic())
        return route(*args)

    monkeypatch.setattr(rel, "_route", counting)
    board.create_queue(QueueSpec("keep", max_unprocessed=1))
    board.post("keep", [Message(body=b"x")])
    board.post("keep", [Message(body=b"%d" % i, not_before=now_us() + S // 5) for i in range(3)])
    wait_for("a first try", lambda: len(tries) > 0)
    time.sleep(1.0)
    assert len(tries) <= 2 * (1.0 / 0.2 + 2), len(tries)  # two a try, a try each 0.2 s
    assert board.stats("keep").queues[0].scheduled == 3
    assert [m.body for m in board.take("keep")] == [b"x"]
    wait_for("the first released", lambda: board.stats("keep").queues[0].scheduled == 2)
