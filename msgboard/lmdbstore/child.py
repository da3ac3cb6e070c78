"""A function run in a forked child, so that LMDB dying on a damaged page
(an assertion's SIGABRT, a read outside its map's SIGSEGV or SIGBUS) ends
the child, not the caller: ``msgboard check``'s backstop behind the page
verifier (``verify.py``). Forking costs a few milliseconds.

Only for a process with no other thread (``fork`` copies one, and Python
warns about it): ``run`` calls the function in-process otherwise.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    """What the child gave back: its result, or the signal that killed it
    (a name such as ``SIGABRT``), or the error it raised (a line)."""

    result: T | None = None
    signal: str = ""
    error: str = ""


def run(fn: Callable[[], T]) -> Outcome[T]:
    """``fn()`` run in a forked child; its result comes back pickled through
    a pipe. In-process when other threads run (errors still raise)."""
    if threading.active_count() > 1:
        return Outcome(result=fn())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        code = 0
        try:
            out: Outcome[T] = Outcome(result=fn())
        except BaseException as e:
            out = Outcome(error=f"{type(e).__name__}: {e}")
        try:
            with os.fdopen(w, "wb") as f:
                pickle.dump(out, f)
        except BaseException:
            code = 3
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return Outcome(signal=signal.Signals(os.WTERMSIG(status)).name)
    if not data:
        return Outcome(error=f"the child exited with status {os.waitstatus_to_exitcode(status)}")
    got: Outcome[T] = pickle.loads(data)
    return got
