"""What a DurableStore keeps in memory between its transactions: ``Cache``,
holding each queue's counters (``QueueState``), the next queue id and
selector number, the commits made, and the damaged records met since open.

Opening fills it from ``meta``, ``queues`` and ``state`` (``durable.py``: a
few reads per queue, never one per message). A write transaction
(``txn.py``) works on private copies of the queues it writes and hands them
to ``publish`` only when LMDB has committed, so an abort leaves no trace; a
reader (``DurableStore.reader``) works on a copy of the queue table of its
commit. A queue's last ``posted_at`` is derived when first needed
(``known``), from its last record and its last ``times`` entry.
"""

from __future__ import annotations

import logging

from msgboard.errors import RecordDamaged
from msgboard.lmdbstore.layout import QID
from msgboard.lmdbstore.store import QueueInfo

# The store's name in the logs, kept from before the cache had a module.
log = logging.getLogger("msgboard.lmdbstore.durable")


class QueueState:
    """A queue's counters: the committed ones in the store's cache, a private
    copy in a transaction that writes the queue."""

    __slots__ = (
        "history",
        "info",
        "known",
        "last_posted",
        "last_second",
        "next_seq",
        "prefix",
        "qid",
        "scheduled",
        "unprocessed",
    )

    def __init__(
        self,
        qid: int,
        info: QueueInfo,
        next_seq: int,
        unprocessed: int,
        history: int,
        scheduled: int = 0,
    ) -> None:
        self.qid = qid
        self.prefix = QID.pack(qid)
        self.info = info
        self.next_seq = next_seq
        self.unprocessed = unprocessed
        self.history = history
        self.scheduled = scheduled
        #: False until last_posted and last_second are read from the records.
        self.known = False
        self.last_posted = 0
        self.last_second = -1

    def copy(self) -> QueueState:
        q = QueueState(
            self.qid, self.info, self.next_seq, self.unprocessed, self.history, self.scheduled
        )
        q.known, q.last_posted, q.last_second = self.known, self.last_posted, self.last_second
        return q


class Cache:
    """The committed queue table and counters of a DurableStore, and the
    damaged records it met. One writer at a time changes it (``publish``,
    ``met``); a reader copies the queue table when it begins."""

    __slots__ = ("commits", "damaged", "next_qid", "next_sid", "queues")

    def __init__(self, queues: dict[str, QueueState], next_qid: int, next_sid: int) -> None:
        #: The queues as committed, by name.
        self.queues = queues
        self.next_qid = next_qid
        self.next_sid = next_sid
        #: Write transactions committed since open.
        self.commits = 0
        #: Per queue, the damage met since open: each damaged record (by
        #: seq, or by place: ("after", seq)), each stale index entry, each
        #: walk that ended short of the counters; with how many messages
        #: each stands for.
        self.damaged: dict[str, dict[tuple[str, int], int]] = {}

    def publish(self, written: dict[str, QueueState | None], next_qid: int, next_sid: int) -> None:
        """Takes in what a transaction committed: the queues it wrote (None:
        deleted) and the next ids."""
        for name, q in written.items():
            if q is None:
                self.queues.pop(name, None)
                self.damaged.pop(name, None)
            else:
                self.queues[name] = q
        self.next_qid = next_qid
        self.next_sid = next_sid
        self.commits += 1

    def met(self, e: RecordDamaged) -> None:
        """Counts a damaged record met while walking a queue, and logs it
        the first time."""
        key = ("after", e.after) if e.after >= 0 else ("seq", e.seq)
        if self._count(e.queue, key, 1):
            log.error("DATA_LOSS: %s; skipped (msgboard check lists every one)", e)

    def short(self, name: str, section: str, want: int, seen: int) -> None:
        """Counts the messages a whole walk of a queue's ``section`` did not
        reach (its counters say ``want``, it met ``seen``), and logs it the
        first time."""
        if self._count(name, ("short " + section, 0), want - seen):
            log.error(
                "DATA_LOSS: queue %r: the walk of its %s found %d of the %d records its "
                "counters say: %d unreachable; msgboard check DIR names them",
                name,
                section,
                seen,
                want,
                want - seen,
            )

    def stale(self, name: str, seq: int) -> None:
        """Counts an index entry of ``name`` pointing at seq ``seq``, which is
        not an unprocessed record, and logs it the first time per queue."""
        first = not any(k[0] == "index" for k in self.damaged.get(name, {}))
        if self._count(name, ("index", seq), 1) and first:
            log.error(
                "DATA_LOSS: queue %r: an index entry points at seq %d, which is not waiting: "
                "index damage, skipped (msgboard check --repair DIR rebuilds the index)",
                name,
                seq,
            )

    def _count(self, name: str, key: tuple[str, int], n: int) -> bool:
        """Counts damage ``key`` of queue ``name`` as ``n`` messages; False
        if it was counted already."""
        found = self.damaged.setdefault(name, {})
        if key in found:
            return False
        found[key] = n
        return True
