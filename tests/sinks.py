"""The routing tests' shared helpers: a consumer's receiving end that
collects deliveries (``Sink``), and small wrappers around an embedded
``Board`` (test_routing, test_expiry, test_redelivery, test_selectors,
test_rollback)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from msgboard import Message
from msgboard.associative import Pattern, template
from msgboard.engine import Board
from msgboard.engine.selectors import Consumer
from msgboard.spec import Delivery


class Sink:
    """A consumer's receiving end that collects deliveries."""

    def __init__(self) -> None:
        self.got: list[Delivery] = []
        self.ended: list[BaseException | None] = []
        self._cond = threading.Condition()

    def deliver(self, batch: list[Delivery]) -> None:
        with self._cond:
            self.got += batch
            self._cond.notify_all()

    def end(self, why: BaseException | None) -> None:
        with self._cond:
            self.ended.append(why)
            self._cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> list[Delivery]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.got) >= n, timeout), (
                f"{len(self.got)} of {n} deliveries"
            )
            return list(self.got)

    def tuples(self) -> list[tuple[object, ...]]:
        return [d.message.tuple for d in self.got]


def subscribe(board: Board, queue: str, **kw: object) -> tuple[Consumer, Sink]:
    sink = Sink()
    c, _ = board.subscribe(queue, deliver=sink.deliver, end=sink.end, **kw)  # type: ignore[arg-type]
    return c, sink


def post(board: Board, queue: str, *tuples: tuple[object, ...], **kw: object) -> list[int]:
    return board.post(queue, [Message(tuple=t, **kw) for t in tuples])  # type: ignore[arg-type]


def settle(board: Board) -> None:
    """Waits until every operation submitted so far has run."""
    board.stats()


def row(board: Board, queue: str) -> object:
    [r] = board.stats(queue).queues
    return r


def nums(n: int) -> list[tuple[object, ...]]:
    return [("n", i) for i in range(n)]


def tpl(*fields: object) -> Pattern:
    return Pattern(templates=(template(*fields),))


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Waits for ``check`` to hold (a condition, not a duration, is tested)."""
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "the condition never held"
        time.sleep(0.02)
