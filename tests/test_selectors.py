"""Selectors' lifetime and input, on the embedded engine over a real LMDB
directory: auto_delete queues, durable selectors across a restart, bad
input, replay from the head, filters, and pulls past the search budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from msgboard import Message, QueueSpec
from msgboard.associative import Pattern
from msgboard.engine import Board
from msgboard.errors import FailedPrecondition, InvalidArgument, NotFound, QueueNotFound
from msgboard.spec import UNLIMITED, Op, Position, SelectorSpec
from tests.sinks import Sink, nums, post, subscribe, tpl

# -- selectors: lifetime and bad input ----------------------------------


def test_auto_delete_queue_goes_with_its_last_selector(board: Board) -> None:
    board.create_queue(QueueSpec("tmp", auto_delete=True))
    board.create_queue(QueueSpec("dst"))
    s = board.create_selector(SelectorSpec("tmp", destination="dst"))
    board.delete_selector(s.id)
    with pytest.raises(QueueNotFound):
        board.get_queue("tmp")


def test_session_subscription_on_auto_delete_queue_deletes_it(board: Board) -> None:
    board.create_queue(QueueSpec("reply", transient=True, auto_delete=True))
    c, _ = subscribe(board, "reply")
    board.unsubscribe(c)
    with pytest.raises(QueueNotFound):
        board.get_queue("reply")


def test_durable_selectors_survive_a_restart(tmp_path: Path) -> None:
    """A durable MOVE selector keeps routing after a restart; a durable
    terminal selector keeps messages waiting while no consumer is attached."""
    path = tmp_path / "board"
    with Board(path) as board:
        for q in ("a", "b"):
            board.create_queue(QueueSpec(q))
        moved = board.create_selector(SelectorSpec("a", tpl("m"), destination="b"))
        term = board.create_selector(SelectorSpec("a", tpl("t"), credit=10))
        post(board, "a", ("t",))
    with Board(path) as board:
        assert [v.id for v in board.list_selectors("a")] == [moved.id, term.id]
        post(board, "a", ("m",), ("t",))
        assert [m.tuple for m in board.read("b")] == [("m",)]
        sink = Sink()
        board.subscribe(deliver=sink.deliver, end=sink.end, selector_id=term.id)
        assert [d.message.tuple for d in sink.wait(2)] == [("t",), ("t",)]
        with pytest.raises(FailedPrecondition, match="already has a consumer"):
            board.subscribe(deliver=sink.deliver, end=sink.end, selector_id=term.id)
        new = board.create_selector(SelectorSpec("b", op=Op.DELETE))
        assert new.id not in (moved.id, term.id)


def test_selector_bad_input_changes_nothing(board: Board) -> None:
    board.create_queue(QueueSpec("a"))
    board.create_queue(QueueSpec("b"))
    with pytest.raises(QueueNotFound, match="source"):
        board.create_selector(SelectorSpec("nope", destination="a"))
    with pytest.raises(QueueNotFound, match="destination"):
        board.create_selector(SelectorSpec("a", destination="nope"))
    with pytest.raises(InvalidArgument, match="credit"):
        board.create_selector(SelectorSpec("a", destination="b", credit=-1))
    with pytest.raises(InvalidArgument, match="destination"):
        board.create_selector(SelectorSpec("a", op=Op.DELETE, destination="b"))
    with pytest.raises(FailedPrecondition, match="cycle"):
        board.create_selector(SelectorSpec("a", destination="a"))
    board.create_selector(SelectorSpec("a", destination="b"))
    with pytest.raises(FailedPrecondition, match="cycle"):
        board.create_selector(SelectorSpec("b", op=Op.COPY, destination="a"))
    with pytest.raises(NotFound):
        board.delete_selector("sel-999")
    assert len(board.list_selectors()) == 1


def test_copy_from_head_replays_history_then_goes_live(board: Board) -> None:
    board.create_queue(QueueSpec("log", max_history=UNLIMITED))
    post(board, "log", *nums(3))
    board.take("log", max=2)
    _, sink = subscribe(board, "log", op=Op.COPY, start=Position.HEAD)
    sink.wait(3)
    post(board, "log", ("n", 3))
    assert [d.message.tuple for d in sink.wait(4)] == nums(4)


def test_selectors_and_subscriptions_apply_filters(board: Board) -> None:
    """Match first, filter second: a selector's filter and a subscription's
    filter each see only what they select."""
    board.create_queue(QueueSpec("in"))
    board.create_queue(QueueSpec("urgent"))
    board.create_selector(SelectorSpec("in", Pattern(filter="priority > 5"), destination="urgent"))
    _, sink = subscribe(board, "in", pattern=Pattern(filter="t[0] = 'x'"))
    board.post(
        "in",
        [Message(tuple=("x",), priority=9), Message(tuple=("x",)), Message(tuple=("y",))],
    )
    assert [m.priority for m in board.read("urgent", max=5)] == [9]
    [d] = sink.wait(1)
    assert (d.message.tuple, d.message.priority) == (("x",), 0)
    assert [m.tuple for m in board.read("in", max=5)] == [("y",)]


def test_a_durable_selector_into_a_transient_queue_goes_with_it(tmp_path: Path) -> None:
    path = tmp_path / "board"
    with Board(path) as board:
        board.create_queue(QueueSpec("src"))
        board.create_queue(QueueSpec("tmp", transient=True))
        board.create_selector(SelectorSpec("src", destination="tmp"))
    with Board(path) as board:
        assert board.list_selectors() == []
        post(board, "src", ("kept",))
        assert [m.tuple for m in board.read("src")] == [("kept",)]


def test_a_pull_goes_on_past_the_search_budget(board: Board) -> None:
    """A subscriber whose pattern the index cannot narrow (a filter) scans in
    budgeted steps; a match beyond the first step is still delivered."""
    from msgboard.lmdbstore.search import FIND_BUDGET

    board.create_queue(QueueSpec("q"))
    board.post("q", [Message(tuple=("x",)) for _ in range(FIND_BUDGET + 500)])
    post(board, "q", ("y",))
    _, sink = subscribe(board, "q", pattern=Pattern(filter="t[0] = 'y'"))
    [d] = sink.wait(1)
    assert d.message.tuple == ("y",)
