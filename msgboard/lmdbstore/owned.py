"""``Owned``: a cursor held by a generator, closed only on the thread that
opened it.

A generator that walks a cursor (``DurableTxn._scan``, the index reads of
``QueueReader``) opens it in ``with Owned(txn.cursor(db), strays) as cur``.
Its consumer closes the generator where it made it (``with`` or
``contextlib.closing``, docs/architecture.md "What crosses a thread"), so
the block ends on the opening thread and closes the cursor. If a
generator is ever left to Python's cyclic collector instead, and the
collector closes it on another thread, the cursor is not closed there
(closing it would unlink it from the LMDB transaction's cursor list while
the owning thread may be walking that list: issue 33's crash): it is kept
in ``strays``, the transaction's list, until the transaction ends on its
own thread (py-lmdb then closes what is left of it there), and the slip
is logged as critical, naming both threads. The check costs one
``threading.get_ident`` per walk, not per record.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import lmdb

log = logging.getLogger("msgboard.store")


class Owned:
    """``cur`` for a ``with`` block: closed at its end on the thread that
    entered it, else kept in ``strays`` (see the module's docstring)."""

    __slots__ = ("_cur", "_strays", "_thread")

    def __init__(self, cur: lmdb.Cursor[bytes], strays: list[Any]) -> None:
        self._cur = cur
        self._strays = strays
        self._thread = 0

    def __enter__(self) -> lmdb.Cursor[bytes]:
        self._thread = threading.get_ident()
        return self._cur

    def __exit__(self, *exc: object) -> None:
        if threading.get_ident() == self._thread:
            self._cur.close()
            return
        self._strays.append(self._cur)
        opened = next((t.name for t in threading.enumerate() if t.ident == self._thread), "?")
        log.critical(
            "a cursor opened on thread %s was left to be closed on thread %s; kept "
            "until its transaction ends (a generator holding it was not closed: "
            "docs/architecture.md, 'What crosses a thread')",
            opened,
            threading.current_thread().name,
        )
