"""Where queues and messages live: the store contract and its two backends.

``DurableStore`` keeps them in LMDB, ``MemoryStore`` in memory (for transient
queues); both keep the contract in ``store.py``. The LMDB side: the store
opens, grows and copies the environment (``durable.py``), its transaction
reads and writes it (``txn.py``, with ``dedup.py`` for idempotency keys,
``schedule.py`` for scheduled messages and ``queuereader.py`` for what
``Search`` and ``seq_at`` read), and ``layout.py`` declares its keys,
records and sub-databases, for the store, ``msgboard check`` (``check.py``)
and the Spark reader alike. A replicated board's store also writes the
operation log (``oplog.py``), which a standby's store applies;
``compare.py`` tells two boards' data apart. Every cursor is closed where
it was opened, on its thread; ``owned.py`` guards the cursors that
generators hold (docs/architecture.md, "What crosses a thread").

Damage (issue 23): ``pages.py`` and ``verify.py`` verify LMDB's pages by
hand before LMDB reads them; ``salvage.py`` names damage by queue from a
walk that never uses LMDB; ``sidecar.py`` (the board marker and the commit
sidecar) and ``opening.py`` decide at start whether a directory may be
served; ``child.py`` runs ``check``'s LMDB read in a forked child;
``damage.py`` drops a damaged record; ``repair.py`` is ``check --repair``.
"""

from __future__ import annotations

from msgboard.lmdbstore.durable import DurableStore
from msgboard.lmdbstore.layout import DAMAGED
from msgboard.lmdbstore.memory import MemoryStore
from msgboard.lmdbstore.oplog import Log, LogGap
from msgboard.lmdbstore.search import FIND_BUDGET, Search
from msgboard.lmdbstore.store import Counts, MapFull, QueueInfo, Store, StoreInfo, Txn

__all__ = [
    "DAMAGED",
    "FIND_BUDGET",
    "Counts",
    "DurableStore",
    "Log",
    "LogGap",
    "MapFull",
    "MemoryStore",
    "QueueInfo",
    "Search",
    "Store",
    "StoreInfo",
    "Txn",
]
