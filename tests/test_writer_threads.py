"""Issue 33: a cursor of the writer's transaction freed on another thread.

A search left before its end (a pull whose chunk is full, a take's first
match) used to sit in a reference cycle with its generator, which held a
cursor of the writer's live transaction; Python's cyclic collector then
freed it on whichever thread allocated, and LMDB's list of the
transaction's cursors changed under the writer: a segfault. The rule now
(docs/architecture.md, "What crosses a thread"): every cursor, and every
generator holding one, is closed where it was opened, on its thread.

- ``test_gc_stress_does_not_crash``: the amplified form, in a child
  process (tests/gcstress.py: a collector thread alone doing the
  collecting, beside fan-out pulls and takes that leave searches);
  before the fix it died of SIGSEGV within seconds in most runs.
- ``test_nothing_holding_a_cursor_is_left_to_the_collector``: the
  mechanism, deterministically: with the automatic collections off, no
  search and no store generator (what holds cursors) outlives the board
  after the same kinds of calls, so none was left for the collector to
  free; before the fix every search left mid-way was.
- ``test_a_walk_closed_on_another_thread_keeps_its_cursor_until_the_end``:
  the guard (lmdbstore/owned.py) should a store generator still be closed
  on a thread that did not open its cursor.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from msgboard import Message
from msgboard.client import Client
from msgboard.lmdbstore import DurableStore, Search
from msgboard.message import Section
from msgboard.spec import QueueSpec
from msgboard.testing import ServerThread

ROOT = Path(__file__).resolve().parent.parent


def test_gc_stress_does_not_crash(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.gcstress", str(tmp_path / "board"), "25"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    died = f"signal {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else ""
    assert proc.returncode == 0, (
        f"the board under GC stress exited {died or proc.returncode}:\n{proc.stderr[-6000:]}"
    )
    assert "fanned out" in proc.stdout


STORE = str(ROOT / "msgboard" / "lmdbstore")


def _left_over(obj: object) -> bool:
    """Whether ``obj`` is a search or a store generator (one that may hold
    a cursor): none should outlive the board."""
    if isinstance(obj, Search):
        return True
    return isinstance(obj, types.GeneratorType) and obj.gi_code.co_filename.startswith(STORE)


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The cyclic collector off during the test: whatever only it could
    free is still there at the end, for ``gc.get_objects`` to show."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("collector_off")
def test_nothing_holding_a_cursor_is_left_to_the_collector(tmp_path: Path) -> None:
    server = ServerThread(tmp_path / "board").start()
    try:
        with Client(server.address, timeout=60) as c:
            # Pulls that stop with their chunk full: a COPY selector into a
            # queue drained by a MOVE subscriber with little credit.
            c.create_queue("src", unmatched="discard")
            c.create_queue("dst")
            c.create_selector("src", op="copy", to="dst")
            c.post_many("src", [Message(body=b"x") for _ in range(300)], batch=100)
            with c.subscribe("dst", credit=5) as sub:
                for got, d in enumerate(sub, 1):
                    sub.ack(d)
                    if got == 40:
                        break
            # Takes that stop at their first match, by a template (the
            # index) and by nothing (a scan); a Read and a Browse page on
            # a reader's view; a move and a delete with a limit.
            c.post_many("dst", [("job", i, "x") for i in range(200)], batch=100)
            for _ in range(5):
                assert c.take("dst", ("job", int, "x"))
                assert c.take("dst")
            assert len(c.read("dst", max=3)) == 3
            assert len(c.browse("dst", limit=3).messages) == 3
            c.create_queue("aside")
            assert len(c.move_messages("dst", "aside", all=True, limit=3)) == 3
            assert len(c.delete_messages("dst", all=True, limit=3)) == 3
    finally:
        server.stop()
    left = [repr(o)[:120] for o in gc.get_objects() if _left_over(o)]
    assert not left, f"{len(left)} left for the collector, e.g. {left[:5]}"


def test_a_walk_closed_on_another_thread_keeps_its_cursor_until_the_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The guard behind the rule (lmdbstore/owned.py): a store generator
    closed on a thread that did not open its cursor leaves the cursor to
    its transaction (closed when that ends, on its own thread) and says so;
    the transaction goes on and commits."""
    store = DurableStore(tmp_path / "board")
    try:
        txn = store.begin()
        txn.create_queue(QueueSpec("q"), 0)
        for _ in range(5):
            txn.append("q", Message(body=b"x"), 1)
        walk = txn.scan("q", Section.UNPROCESSED)
        assert next(walk).seq == 1
        elsewhere = threading.Thread(target=walk.close)
        with caplog.at_level(logging.CRITICAL, "msgboard.store"):
            elsewhere.start()
            elsewhere.join()
        assert "was left to be closed on thread" in caplog.text
        assert txn.process("q", 1, 2, 10).seq == 1  # the walk's db, written
        with closing(txn.scan("q", Section.UNPROCESSED)) as rows:
            assert [m.seq for m in rows] == [2, 3, 4, 5]
        txn.commit()
        assert store.begin().counts("q").unprocessed == 4
    finally:
        store.close()
