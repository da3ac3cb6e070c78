"""A board's changes of role, announced on ``$sys`` (``RoleEvents``), told
with a real board (the engine, embedded) and the ``Role`` a cluster's node
changes: promoted when it comes to lead in an epoch, demoted when it stops,
each once, in order; a primary of static roles announces nothing."""

from __future__ import annotations

import time
from pathlib import Path

from msgboard.cluster import Role
from msgboard.cluster.roleevents import RoleEvents
from msgboard.engine import Board
from msgboard.spec import Delivery


def _events(got: list[Delivery], n: int) -> list[tuple[object, ...]]:
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return [tuple(d.message.tuple) for d in got if str(d.message.tuple[0]).startswith("cluster.")]


def test_promotions_and_demotions_are_announced_once_each(tmp_path: Path) -> None:
    """Given a standby's role (no primary known yet) and a board announcing
    it, when the role is elected in epoch 7, then learns of a new primary
    (demoted, following b:2 in epoch 9), is told the same again, and is
    elected in epoch 12, I expect promoted 7, demoted 7 b:2, promoted 12,
    and nothing for the repeated change, nor once stopped."""
    with Board(tmp_path) as board:
        got: list[Delivery] = []
        board.subscribe("$sys", deliver=got.extend, end=lambda why: None, credit=100)
        role = Role(leading=False)
        events = RoleEvents(role, board.emit)
        role.become(leading=True, primary=None, epoch=7)
        role.become(leading=False, primary="b:2", epoch=9)
        role.become(leading=False, primary="b:2", epoch=9)
        role.become(leading=True, primary=None, epoch=12)
        events.stop()  # the board closes: a later change is another board's to announce
        role.become(leading=False, primary="c:3", epoch=13)
        board.emit("board.stopping")
        _events(got, 5)
        assert _events(got, 5) == [
            ("cluster.promoted", 7),
            ("cluster.demoted", 7, "b:2"),
            ("cluster.promoted", 12),
        ]


def test_a_board_opened_as_the_new_primary_says_so_and_static_roles_do_not(
    tmp_path: Path,
) -> None:
    for epoch, expected in ((0, []), (5, [("cluster.promoted", 5)])):
        with Board(tmp_path / str(epoch)) as board:
            got: list[Delivery] = []
            board.subscribe("$sys", deliver=got.extend, end=lambda why: None, credit=100)
            RoleEvents(Role(epoch=epoch), board.emit)
            board.emit("board.stopping")  # a last event: the ones before it are in
            deadline = time.monotonic() + 30
            while not any(d.message.tuple[0] == "board.stopping" for d in got):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert _events(got, 0) == expected
