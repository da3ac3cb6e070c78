"""What comes back, on the embedded engine over a real LMDB directory:
nacks after a backoff, max_deliveries, rejects, a consumer or selector
leaving, per-delivery acks, and leased Takes (engine/holders.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from msgboard import QueueSpec
from msgboard.engine import Board
from msgboard.errors import InvalidArgument, NotFound
from msgboard.spec import UNLIMITED, SelectorSpec
from tests.sinks import Sink, nums, post, row, subscribe

# -- redelivery --------------------------------------------------------------


def test_nack_gives_back_after_a_backoff_with_the_count_raised(board: Board) -> None:
    board.create_queue(QueueSpec("q"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("x",))
    [d] = sink.wait(1)
    board.nack(c, [d.id])
    r = row(board, "q")
    # Held back, not redelivered at once.
    assert (r.outstanding, r.ready, len(sink.got)) == (1, 0, 1)  # type: ignore[attr-defined]
    again = sink.wait(2)[1]
    assert again.message.seq == d.message.seq
    assert again.message.delivery_count == 2


def test_past_max_deliveries_a_message_is_dead_lettered(board: Board) -> None:
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq", max_deliveries=2))
    c, sink = subscribe(board, "q")
    post(board, "q", ("poison",))
    board.nack(c, [sink.wait(1)[0].id])
    board.nack(c, [sink.wait(2)[1].id])
    [dead] = board.read("dlq", timeout=5)
    assert dead.headers["x-dead-letter-reason"] == "max-deliveries"
    assert board.get_queue("q").unprocessed == 0


def test_reject_dead_letters_at_once(board: Board) -> None:
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("bad",))
    board.nack(c, [sink.wait(1)[0].id], reject=True)
    [dead] = board.read("dlq")
    assert dead.headers["x-dead-letter-reason"] == "rejected"


def test_a_consumer_leaving_gives_back_its_messages_in_seq_order(board: Board) -> None:
    """Outstanding messages of a consumer that goes return in seq order, with
    their delivery count raised, to the next consumer."""
    board.create_queue(QueueSpec("q"))
    c, first = subscribe(board, "q", credit=3)
    post(board, "q", *nums(5))
    first.wait(3)
    board.ack(c, [first.got[1].id])
    first.wait(4)  # the ack gave credit back: ("n", 3) came
    board.unsubscribe(c)
    _, second = subscribe(board, "q")
    got = second.wait(4)
    assert [d.message.tuple for d in got] == [("n", 0), ("n", 2), ("n", 3), ("n", 4)]
    assert [d.message.delivery_count for d in got] == [2, 2, 2, 1]


def test_deleting_a_selector_gives_back_its_messages(board: Board) -> None:
    board.create_queue(QueueSpec("q"))
    s = board.create_selector(SelectorSpec("q"))
    sink = Sink()
    board.subscribe(deliver=sink.deliver, end=sink.end, selector_id=s.id)
    post(board, "q", ("x",))
    sink.wait(1)
    board.delete_selector(s.id)
    assert isinstance(sink.ended[0], NotFound)
    [m] = board.take("q")
    assert m.delivery_count == 2


def test_acks_are_per_delivery(board: Board) -> None:
    """An ack applies every id it can and answers the others one by one; a
    repeated ack changes nothing and is answered NOT_FOUND."""
    board.create_queue(QueueSpec("q"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("x",), ("y",))
    a, b = sink.wait(2)
    acked = board.ack(c, [a.id, 99])
    assert acked.ids == [a.id]
    assert isinstance(acked.rejected[99], InvalidArgument)
    assert "never delivered" in str(acked.rejected[99])
    assert row(board, "q").outstanding == 1  # type: ignore[attr-defined]
    again = board.ack(c, [a.id, a.id])
    assert again.ids == [] and list(again.rejected) == [a.id]
    assert isinstance(again.rejected[a.id], NotFound)
    assert "already acked" in str(again.rejected[a.id])
    assert again.rejected[a.id].field == "ack.ids[0]"  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgument):
        board.add_credit(c, -1)
    assert board.ack(c, [b.id]).ids == [b.id]
    assert board.get_queue("q").unprocessed == 0


def test_an_up_to_past_the_last_delivery_acks_what_was_delivered(board: Board) -> None:
    """Given two deliveries outstanding, when I ack up to an id past the
    last, I expect both acked and named in the answer, nothing rejected;
    later deliveries are not covered by it."""
    board.create_queue(QueueSpec("q"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("x",), ("y",))
    a, b = sink.wait(2)
    late = board.ack(c, [], up_to=b.id + 5)
    assert (late.ids, late.rejected) == ([a.id, b.id], {})
    assert board.get_queue("q").unprocessed == 0
    post(board, "q", ("z",))
    [_, _, z] = sink.wait(3)
    assert z.id == b.id + 1  # a later delivery: not covered by the past ack
    assert row(board, "q").outstanding == 1  # type: ignore[attr-defined]


# -- leases ------------------------------------------------------------------


def test_a_leased_take_is_invisible_until_acked(board: Board) -> None:
    board.create_queue(QueueSpec("q", max_history=UNLIMITED))
    post(board, "q", ("a",), ("b",))
    [d] = board.take_leased("q", lease=60)
    assert d.message.tuple == ("a",) and d.message.delivery_count == 1
    assert [m.tuple for m in board.take("q", max=10)] == [("b",)]
    assert board.ack_leases("q", [d.id]).ids == [d.id]
    again = board.ack_leases("q", [d.id])
    assert again.ids == [] and isinstance(again.rejected[d.id], NotFound)
    assert "already acked" in str(again.rejected[d.id])
    never = board.ack_leases("q", [12345]).rejected[12345]
    assert isinstance(never, InvalidArgument) and "never given" in str(never)
    assert board.get_queue("q").unprocessed == 0


def test_acks_of_leases_are_per_lease(board: Board) -> None:
    """Given two leases, when I ack them with one lease already acked, one
    never given and one of another queue in the same request, I expect the
    good one applied and each other answered on its own, with its place in
    the request, as a consumer's acks are."""
    board.create_queue(QueueSpec("q"))
    board.create_queue(QueueSpec("other"))
    post(board, "q", ("a",), ("b",))
    post(board, "other", ("c",))
    first, second = board.take_leased("q", lease=60, max=2)
    [theirs] = board.take_leased("other", lease=60)
    board.ack_leases("q", [first.id])
    got = board.ack_leases("q", [first.id, 999, second.id, theirs.id, second.id])
    assert got.ids == [second.id]
    gone, never, elsewhere = got.rejected[first.id], got.rejected[999], got.rejected[theirs.id]
    assert isinstance(gone, NotFound) and gone.field == "lease_ids[0]"
    assert isinstance(never, InvalidArgument) and never.field == "lease_ids[1]"
    assert isinstance(elsewhere, InvalidArgument) and elsewhere.field == "lease_ids[3]"
    assert "'other'" in str(elsewhere)
    assert board.get_queue("q").unprocessed == 0
    assert board.get_queue("other").unprocessed == 1  # still leased, untouched
    nacked = board.ack_leases("other", [theirs.id, first.id], nack=True)
    assert nacked.ids == [theirs.id] and list(nacked.rejected) == [first.id]
    [m] = board.take("other", timeout=5)
    assert m.delivery_count == 2


def test_a_lease_that_runs_out_brings_the_message_back(board: Board) -> None:
    board.create_queue(QueueSpec("q"))
    post(board, "q", ("a",))
    [d] = board.take_leased("q", lease=0.2)
    assert board.take("q") == []
    [m] = board.take("q", timeout=5)
    assert (m.tuple, m.delivery_count) == (("a",), 2)
    assert isinstance(board.ack_leases("q", [d.id]).rejected[d.id], NotFound)


def test_a_lease_given_before_a_restart_never_acks_one_given_after(tmp_path: Path) -> None:
    """Given a board that leased a message and then restarted (as after a
    kill -9 or a failover, where leases are lost and the message waits
    again), when a new lease is given and the old lease's id is acked, I
    expect the ack rejected and the new lease still held: lease ids are
    never given twice, so an old ack cannot take a message its sender never
    got."""
    with Board(tmp_path / "b") as first:
        first.create_queue(QueueSpec("q", max_history=UNLIMITED))
        post(first, "q", ("a",), ("b",))
        [old] = first.take_leased("q", lease=60)
    with Board(tmp_path / "b") as again:
        [new] = again.take_leased("q", lease=60)
        assert new.id > old.id
        stale = again.ack_leases("q", [old.id])
        assert stale.ids == [] and isinstance(stale.rejected[old.id], InvalidArgument)
        assert "restart or a failover" in str(stale.rejected[old.id])
        assert again.ack_leases("q", [new.id]).ids == [new.id]
        assert again.get_queue("q").unprocessed == 1
