"""Rule 8 on the embedded engine over a real LMDB directory: an expired
message is dead-lettered, never delivered, whoever meets it first or the
expiry sweep (engine/expiry.py), before and after a restart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from msgboard import QueueSpec
from msgboard.engine import Board, expiry
from tests.sinks import nums, post, row, subscribe, until


def test_expired_messages_are_dead_lettered_never_delivered(board: Board) -> None:
    """Rule 8: an expired message is never delivered, by a selector or a
    Take; it goes to the dead-letter queue."""
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq"))
    soon = int(time.time() * 1e6) + 100_000
    post(board, "q", ("late",), expires_at=soon)
    post(board, "q", ("past",), expires_at=1)
    time.sleep(0.15)
    assert board.take("q") == []
    _, sink = subscribe(board, "q")
    post(board, "q", ("fresh",))
    sink.wait(1)
    assert sink.tuples() == [("fresh",)]
    reasons = {m.tuple: m.headers["x-dead-letter-reason"] for m in board.read("dlq", max=10)}
    assert reasons == {("late",): "expired", ("past",): "expired"}


def test_an_expired_message_nobody_meets_is_swept_and_counted(board: Board) -> None:
    """Rule 8, with nothing touching the queue: I expect a waiting message to
    leave for the dead-letter queue soon after its expiry (not counting as
    waiting any more), another with a later expiry to stay, and Stats to
    count it as expired (and dead-lettered)."""
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq"))
    now = int(time.time() * 1e6)
    post(board, "q", ("soon",), expires_at=now + 200_000)
    post(board, "q", ("later",), expires_at=now + 3600_000_000)
    post(board, "q", ("never",))
    until(lambda: board.get_queue("dlq").unprocessed == 1)
    [dead] = board.read("dlq")
    assert (dead.tuple, dead.headers["x-dead-letter-reason"]) == (("soon",), "expired")
    assert [m.tuple for m in board.read("q", max=10)] == [("later",), ("never",)]
    r = row(board, "q")
    assert (r.expired, r.dead_lettered, r.unprocessed) == (1, 1, 2)  # type: ignore[attr-defined]


def test_expired_messages_are_swept_after_a_restart_too(tmp_path: Path) -> None:
    """Given messages with an expiry waiting when the board closes, I expect
    the reopened board to sweep them without anything meeting them."""
    now = int(time.time() * 1e6)
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("dlq"))
        board.create_queue(QueueSpec("q", dead_letter="dlq"))
        post(board, "q", *nums(3), expires_at=now + 300_000)
        post(board, "q", ("stays",))
    with Board(tmp_path / "b") as board:
        until(lambda: board.get_queue("dlq").unprocessed == 3)
        assert [m.tuple for m in board.read("q", max=10)] == [("stays",)]
        assert row(board, "q").expired == 3  # type: ignore[attr-defined]


def test_sweep_and_catch_up_go_on_past_their_budgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given budgets of 10 entries per operation and 25 messages expiring
    (after a restart, so that the index is rebuilt too), I expect every one
    swept: each step goes on in the next operation."""
    monkeypatch.setattr(expiry, "SWEEP_BUDGET", 10)
    monkeypatch.setattr(expiry, "CATCH_UP_BUDGET", 10)
    now = int(time.time() * 1e6)
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("dlq"))
        for q in ("q1", "q2"):
            board.create_queue(QueueSpec(q, dead_letter="dlq"))
        post(board, "q1", *nums(15), expires_at=now + 300_000)
        post(board, "q2", *nums(10), expires_at=now + 300_000)
    with Board(tmp_path / "b") as board:
        until(lambda: board.get_queue("dlq").unprocessed == 25)
        assert board.get_queue("q1").unprocessed == board.get_queue("q2").unprocessed == 0


def test_a_message_held_when_it_expires_is_dead_lettered_when_it_comes_back(
    board: Board,
) -> None:
    """Given a delivered message that expires before its consumer nacks it, I
    expect the sweep to leave it to its consumer and the nack to dead-letter
    it, never delivering it again."""
    board.create_queue(QueueSpec("dlq"))
    board.create_queue(QueueSpec("q", dead_letter="dlq"))
    c, sink = subscribe(board, "q")
    post(board, "q", ("x",), expires_at=int(time.time() * 1e6) + 200_000)
    [d] = sink.wait(1)
    time.sleep(0.4)  # past its expiry while held: the sweep must not take it
    assert board.get_queue("dlq").unprocessed == 0
    board.nack(c, [d.id])
    until(lambda: board.get_queue("dlq").unprocessed == 1)
    assert len(sink.got) == 1
    assert row(board, "q").expired == 1  # type: ignore[attr-defined]


def test_catch_up_counts_each_queue_it_visits_against_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given 12 queues each holding one message that expires soon, a budget
    of 4 per operation (less than one queue's visit, ``VISIT_COST``) and a
    restart, I expect the catch-up to go on over several operations (a
    board of 100,000 queues is not walked in one), each making progress,
    and every message to be swept."""
    monkeypatch.setattr(expiry, "CATCH_UP_BUDGET", 4)
    steps: list[int] = []
    catch_up = expiry.Expiry.catch_up

    def counted(
        self: expiry.Expiry, b: Any, queues: list[str], at: int = 0, start: int = 1
    ) -> None:
        steps.append(at)
        catch_up(self, b, queues, at, start)

    monkeypatch.setattr(expiry.Expiry, "catch_up", counted)
    now = int(time.time() * 1e6)
    with Board(tmp_path / "b") as board:
        board.create_queue(QueueSpec("dlq"))
        board.create_queue(QueueSpec("empty"))
        for i in range(12):
            board.create_queue(QueueSpec(f"q{i:02}", dead_letter="dlq"))
            post(board, f"q{i:02}", ("x", i), expires_at=now + 500_000)
    with Board(tmp_path / "b") as board:
        until(lambda: board.get_queue("dlq").unprocessed == 12)
        assert len(steps) >= 6
        assert steps == sorted(steps)  # each step goes on where the last stopped
