"""The handoff: answers from another thread reach the event loop in bursts."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from msgboard.errors import NotFound
from msgboard.server.handoff import Handoff


def _counting_wakeups(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Counts the loop's ``call_soon_threadsafe`` calls (its wake-ups from
    other threads) in the returned one-item list."""
    count = [0]
    original = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    return count


def test_a_burst_of_answers_wakes_the_loop_once() -> None:
    """Given 50 futures answered together by another thread (as the writer
    answers a group commit) and a delivery handed over with them, I expect
    every result on the loop after one wake-up, not 51."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        wakeups = _counting_wakeups(loop)
        handoff = Handoff.of(loop)
        assert Handoff.of(loop) is handoff
        futs: list[Future[int]] = [Future() for _ in range(50)]
        waits = [handoff.wait(f) for f in futs]
        got: list[str] = []

        def writer() -> None:
            for i, f in enumerate(futs):
                f.set_result(i)
            handoff.call(got.append, "delivery")

        t = threading.Thread(target=writer)
        t.start()
        t.join()  # the loop is held here: the whole burst is queued
        assert await asyncio.gather(*waits) == list(range(50))
        assert got == ["delivery"]
        assert wakeups[0] == 1

    asyncio.run(main())


def test_errors_and_cancellation_cross_the_handoff() -> None:
    """An error set on the future is raised by the await; cancelling the
    await cancels a future that has not started."""

    async def main() -> None:
        handoff = Handoff.of(asyncio.get_running_loop())
        bad: Future[int] = Future()
        threading.Thread(target=bad.set_exception, args=(NotFound("gone"),)).start()
        with pytest.raises(NotFound, match="gone"):
            await handoff.wait(bad)
        slow: Future[int] = Future()

        async def caller() -> int:
            return await handoff.wait(slow)

        task = asyncio.create_task(caller())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the cancellation's callbacks
        assert slow.cancelled()

    asyncio.run(main())
