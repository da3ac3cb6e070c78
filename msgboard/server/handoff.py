"""The handoff: what the writer thread answers, brought to an event loop with
one wake-up per burst rather than one per future.

The writer thread answers a whole group commit at once: every future of the
group, every delivery batch. ``asyncio.wrap_future`` would wake the event
loop once for each (a ``call_soon_threadsafe``: a write to the loop's
self-pipe and a GIL handover). Here each answer is queued, and only the
first of a burst wakes the loop, which then runs everything queued so far.

    handoff = Handoff.of(asyncio.get_running_loop())
    result = await handoff.wait(board.get_queue_async("jobs"))
    handoff.call(push, item)  # from any thread

``wait(fut)`` is the first line's short form, for the running loop: the
service's calls and the streams await the board's futures with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Handoff] = (
    weakref.WeakKeyDictionary()
)


class Handoff:
    """Calls queued from any thread, run on one event loop in bursts."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._ready: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> Handoff:
        """The loop's handoff (one per loop)."""
        h = _BY_LOOP.get(loop)
        if h is None:
            h = _BY_LOOP[loop] = cls(loop)
        return h

    def call(self, fn: Callable[..., object], *args: Any) -> None:
        """Runs ``fn(*args)`` on the loop, soon; callable from any thread.
        Dropped if the loop is closed."""
        with self._lock:
            self._ready.append((fn, args))
            if len(self._ready) > 1:
                return  # a wake-up is already on its way
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for fn, args in ready:
            fn(*args)

    def wait(self, fut: Future[T]) -> asyncio.Future[T]:
        """``fut`` as an asyncio future of this loop (call on the loop):
        ``asyncio.wrap_future`` with a shared wake-up. Cancelling the
        asyncio future cancels ``fut`` (if it has not started)."""
        out: asyncio.Future[T] = self._loop.create_future()

        def settle(f: Future[T]) -> None:
            if out.done():
                return
            if f.cancelled():
                out.cancel()
                return
            e = f.exception()
            if e is not None:
                out.set_exception(e)
            else:
                out.set_result(f.result())

        def cancelled(o: asyncio.Future[T]) -> None:
            if o.cancelled():
                fut.cancel()

        out.add_done_callback(cancelled)
        fut.add_done_callback(lambda f: self.call(settle, f))
        return out


async def wait(fut: Future[T]) -> T:
    """``fut``'s result, awaited through the running loop's handoff."""
    return await Handoff.of(asyncio.get_running_loop()).wait(fut)
