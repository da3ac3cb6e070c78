"""A test aid: ``MSGBOARD_GC_STRESS=MS`` in the environment of ``msgboard
serve`` starts a thread that runs Python's cyclic garbage collector every
MS milliseconds (0: back to back), with the automatic collections off, so
that whatever only the collector frees is freed on that thread, never on
the thread that dropped it. A resource left for the collector (a cursor
inside a reference cycle) then meets another thread at once instead of
once an hour: bench/soak.py and tests/test_writer_threads.py run boards
so (docs/architecture.md, "What crosses a thread"). Unset, empty or not a
number: nothing starts. Not for production: it costs CPU.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time

log = logging.getLogger(__name__)

#: The environment variable that asks for the thread.
ENV = "MSGBOARD_GC_STRESS"
#: Every this many collections one is full (generation 2): with the
#: automatic ones off, a cycle that outlived two collections is freed
#: only by a full one.
FULL_EVERY = 1000


def start(env: dict[str, str] | None = None) -> threading.Thread | None:
    """Starts the thread if ``env`` (default: the process's) asks for it."""
    raw = (os.environ if env is None else env).get(ENV, "").strip()
    try:
        pause = float(raw) / 1000 if raw else -1.0
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds: no GC stress", ENV, raw)
        return None
    if pause < 0:
        return None
    log.warning("%s: a thread runs the garbage collector every %s ms (a test aid)", ENV, raw)
    t = threading.Thread(target=_collect, args=(pause,), name="msgboard-gc-stress", daemon=True)
    t.start()
    return t


def _collect(pause: float) -> None:
    gc.disable()
    n = 0
    while True:
        n += 1
        gc.collect(2 if n % FULL_EVERY == 0 else 1)
        time.sleep(pause)
