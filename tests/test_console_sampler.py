"""The console's sampler: an hour of each queue's depth and rates, bounded.

Given readings of a real board's Stats filed at chosen times, I expect the
rates to be the counters' differences over the time between readings, the
ring to keep only its last ``points`` readings, at most ``limit`` queues to
have a chart, a queue that goes away to drop its series, and ``series``
to answer only the readings after ``since``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

from msgboard.console import Console
from msgboard.console.sampler import Sampler
from msgboard.engine import Board
from msgboard.results import BoardStats
from msgboard.spec import QueueSpec


def stats(board: Board) -> BoardStats:
    return board.stats()


def posted_as(s: BoardStats, **posted: int) -> BoardStats:
    """``s`` with each named queue's ``posted`` counter set."""
    rows = [dataclasses.replace(q, posted=posted.get(q.name, q.posted)) for q in s.queues]
    return dataclasses.replace(s, queues=rows)


def test_rates_are_differences_over_the_time_between_readings(board: Board) -> None:
    board.create_queue(QueueSpec("a"))
    sampler = Sampler(Console(board, every=5.0))
    s = stats(board)
    sampler.add(posted_as(s, a=10), 1000.0, {"a": 3})
    assert sampler.rates("a") == (0.0, 0.0)  # one reading: no rate yet
    sampler.add(posted_as(s, a=60), 1005.0, {"a": 28})
    assert sampler.rates("a") == (10.0, 5.0)  # 50 posts, 25 gone in 5 s
    got = sampler.series(["a"])
    assert got["t"] == [1000.0, 1005.0]
    assert got["queues"] == {
        "a": {
            "ready": [0.0, 0.0],
            "outstanding": [0.0, 0.0],
            "in": [None, 10.0],
            "out": [None, 5.0],
        }
    }
    later = sampler.series(["a"], since=1000.0)
    assert later["t"] == [1005.0]


def test_the_ring_keeps_the_last_hour_only(board: Board) -> None:
    board.create_queue(QueueSpec("a"))
    sampler = Sampler(Console(board, every=5.0), span=20.0)  # 4 points
    assert sampler.points == 4
    s = stats(board)
    for i in range(10):
        sampler.add(posted_as(s, a=i), 1000.0 + 5 * i, {})
    got = sampler.series(["a"])
    assert got["t"] == [1030.0, 1035.0, 1040.0, 1045.0]
    rates = got["queues"]["a"]["in"]  # type: ignore[index]
    assert rates == [0.2, 0.2, 0.2, 0.2]
    assert all(len(col) == 4 for col in sampler.queues["a"].columns.values())


def test_charted_queues_are_bounded_and_dropped_when_gone(board: Board) -> None:
    for name in ("a", "b", "c"):
        board.create_queue(QueueSpec(name))
    sampler = Sampler(Console(board, every=5.0), limit=2)
    sampler.add(stats(board), 1000.0, {})
    assert sorted(sampler.queues) == ["a", "b"]  # c: in the table, no chart
    assert sampler.series(["a", "c"])["queues"].keys() == {"a"}  # type: ignore[attr-defined]
    board.delete_queue("a")
    sampler.add(stats(board), 1005.0, {})
    assert sorted(sampler.queues) == ["b"]
    sampler.add(stats(board), 1010.0, {})
    assert sorted(sampler.queues) == ["b", "c"]  # room again


def test_a_sample_reads_the_board_from_the_event_loop(board: Board) -> None:
    board.create_queue(QueueSpec("a"))
    sampler = Sampler(Console(board))

    async def run() -> None:
        await sampler.sample()

    asyncio.run(run())
    assert sampler.latest is not None and [q.name for q in sampler.latest.queues] == ["a"]
    assert not math.isnan(sampler.times[0])
    none = Sampler(Console(None))
    asyncio.run(none.sample())
    assert none.latest is None


def test_a_board_too_big_to_read_every_5_s_is_read_less_often(board: Board) -> None:
    sampler = Sampler(Console(board, every=5.0))
    assert sampler.pause(0.01) == 5.0
    assert sampler.pause(0.5) == 25.0  # a reading never more than 2% of the time
