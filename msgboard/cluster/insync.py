"""The in-sync set of a cluster's primary, kept in etcd: ``InSync``.

A ``SyncGate`` that counts only the standbys the set stored in etcd names
(docs/plans/cluster/DESIGN.md §3, §5). The rule it keeps: every write
answered OK is on at least ``needed`` members of the stored set, so the
promotion rule (``members.promotable``) always finds a member that has it.

- **At election** the set is written empty: the new primary counts on
  nobody yet, and the last term's set may name boards that miss what this
  primary had.
- **A standby joins** once its acknowledged index has reached where the log
  stood a moment ago (it is not behind) and where it stood when the term
  began (the writes of earlier terms: once the set names anyone, they
  must be on its members): the set naming it is written to etcd *first*,
  then the gate counts its acks.
- **A member that lags** (not connected, or not at where the log stood
  ``timeout`` seconds ago) is removed: the gate stops counting it *first*,
  then, if the other members' acks cover every index the gate may have
  released, the set without it is written; otherwise it is counted again
  and stays until they do.

Every write is a compare-and-swap on this term's epoch and the set's last
revision (``Leadership.write_sync``): a deposed primary changes nothing.
The standbys' streams call ``connected``, ``ack`` and ``gone`` on the
event loop; the etcd writes happen on a thread of this object's own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from msgboard.cluster.etcd import TRANSIENT
from msgboard.cluster.keys import SyncSet
from msgboard.cluster.leadership import Leadership
from msgboard.cluster.sync import SyncGate
from msgboard.engine import Release
from msgboard.errors import MsgboardError, NoLease
from msgboard.lmdbstore import Log

log = logging.getLogger("msgboard.cluster")

#: How often the set is looked at (seconds).
TICK = 0.2
#: Entries a standby that keeps up may still lack (a batch on the wire).
INFLIGHT = 2


def joins(acked: int, last: int, base: int = 0) -> bool:
    """Whether a standby that acknowledged ``acked`` joins the set of a
    primary whose log ends at ``last`` and ended at ``base`` when its term
    began: it keeps up (a batch on the wire behind at most), and it holds
    every entry of the terms before, which this term's set must hold on
    its own once it names anyone (the set written at election is empty).
    The gate, and the model of the protocol in tests/cluster_model.py,
    ask this."""
    return acked >= max(base, last - INFLIGHT)


def released(acks: Iterable[int], needed: int) -> int:
    """The highest log index that ``needed`` of the counted members'
    acknowledgements ``acks`` cover: what the gate may answer (0: none)."""
    ranked = sorted(acks, reverse=True)
    return ranked[needed - 1] if 0 < needed <= len(ranked) else 0


class InSync(SyncGate):
    """The gate of the primary that ``leadership`` elected, counting only
    the members of the in-sync set it keeps in etcd."""

    def __init__(
        self,
        leadership: Leadership,
        oplog: Log,
        call_soon: Callable[[Callable[[], object]], None],
        *,
        needed: int = 1,
        timeout: float = 5.0,
        allow_async: bool = False,
        forget: float = 3600.0,
    ) -> None:
        super().__init__(
            oplog,
            call_soon,
            needed=needed,
            timeout=timeout,
            allow_async=allow_async,
            forget=forget,
        )
        self.leadership = leadership
        term = leadership.term()
        #: The term this gate answers for (-1: it had ended already).
        self.epoch = term.epoch if term is not None else -1
        #: Where the log ended when this term began: a standby joins only
        #: once it holds that much (``joins``).
        self.base = oplog.last
        self._oplog = oplog
        self._lock = threading.Lock()
        #: The set as stored (None until this term wrote it).
        self.stored: SyncSet | None = None
        #: Every connected standby's acknowledged index.
        self._standbys: dict[str, int] = {}
        #: The members the gate counts, with their acks as it was told.
        self._counted: dict[str, int] = {}
        #: How each connected standby is named in messages (its address).
        self._labels_seen: dict[str, str] = {}
        #: The data directory (``board-id``) each connected standby said.
        self._ids: dict[str, str] = {}
        #: When each standby's stream last ended.
        self._left: dict[str, float] = {}
        #: Groups held and not yet released (a switchover waits for none).
        self.pending = 0
        #: The highest index the gate may have released on counted acks.
        self.covered = 0
        #: (time, log's last index) samples, for "where the log stood".
        self._samples: deque[tuple[float, int]] = deque()
        self._done = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name="msgboard-insync", daemon=True)
        self._keeper.start()

    def acked(self, name: str) -> int:
        """The index ``name`` acknowledged last (0: not connected)."""
        with self._lock:
            return self._standbys.get(name, 0)

    @property
    def members(self) -> tuple[str, ...]:
        s = self.stored
        return s.standbys if s is not None else ()

    def _same(self, name: str) -> bool:
        """Under the lock: whether the standby connected as ``name`` is the
        member the set names (it has the directory it joined with), not a
        board made again under that name after its disk was lost."""
        recorded = self.stored.id_of(name) if self.stored is not None else ""
        return not recorded or recorded == self._ids.get(name, "")

    def _ids_for(self, names: Iterable[str], joining: str) -> dict[str, str]:
        """Under the lock: the directory of each of ``names`` for the set:
        the one recorded (a member's does not change unless it joins
        again), else, and for ``joining``, the one it is connected with."""
        s = self.stored
        recorded = {n: s.id_of(n) if s is not None and n != joining else "" for n in names}
        return {n: recorded[n] or self._ids.get(n, "") for n in names}

    # -- the writer's side ----------------------------------------------

    def hold(self, release: Release) -> None:
        """As ``SyncGate.hold``, and the answer fence: a group released once
        this board's term has ended is answered NoLease, never OK."""

        def fenced(err: MsgboardError | None) -> None:
            with self._lock:
                self.pending -= 1
            if err is None and not self._leading():
                err = NoLease(self.epoch)
            release(err)

        with self._lock:
            self.pending += 1
        super().hold(fenced)

    def _leading(self) -> bool:
        t = self.leadership.term()
        return t is not None and t.epoch == self.epoch

    # -- the streams' side (event loop) ---------------------------------

    def connected(self, name: str, index: int, label: str = "", directory: str = "") -> None:
        with self._lock:
            self._standbys[name] = index
            self._labels_seen[name] = label
            self._ids[name] = directory
            counted = name in self.members and self._same(name)
            if counted:
                self._count(name, index)
        if counted:
            super().connected(name, index, label)

    def ack(self, name: str, index: int) -> None:
        with self._lock:
            self._standbys[name] = index
            counted = name in self._counted
            if counted:
                self._count(name, index)
        if counted:
            super().ack(name, index)

    def gone(self, name: str) -> None:
        with self._lock:
            self._standbys.pop(name, None)
            self._left[name] = time.monotonic()
            counted = self._counted.pop(name, None) is not None
        if counted:
            super().gone(name)

    def _count(self, name: str, index: int) -> None:
        """Under the lock: ``name``'s ack counts; what it may release."""
        self._counted[name] = index
        self.covered = max(self.covered, released(self._counted.values(), self.needed))

    # -- the keeper (its own thread) ------------------------------------

    def _keep(self) -> None:
        while not self._done.is_set():
            try:
                if not self._leading():
                    return  # the term ended: the node closes this gate
                if self.stored is None:
                    self._write(())
                else:
                    self._look()
            except TRANSIENT as e:
                log.info("in-sync set: etcd: %s", e)
            except Exception:
                log.exception("in-sync set: unexpected error")
            self._done.wait(TICK)

    def _sample(self) -> int:
        """Samples the log's last index; where it stood ``timeout`` seconds
        ago (0 if this term is younger)."""
        now = time.monotonic()
        samples = self._samples
        samples.append((now, self._oplog.last))
        while len(samples) > 1 and samples[1][0] <= now - self.timeout:
            samples.popleft()
        return samples[0][1] if samples[0][0] <= now - self.timeout else 0

    def _look(self) -> None:
        now = time.monotonic()
        stood = self._sample()
        with self._lock:
            # A standby that keeps up may lack a batch on the wire.
            # A member back with a new directory (its disk was lost) joins
            # again, and until then is not counted; it replaces the member
            # it was, so it must hold everything answered on that one's acks.
            joining = [
                n for n, i in self._standbys.items()
                if (n not in self.members or (not self._same(n) and i >= self.covered))
                and joins(i, self._oplog.last, self.base)
            ]  # fmt: skip
            lagging = [
                n for n in self.members
                if (n not in self._standbys and now - self._left.get(n, now) > self.timeout)
                or (n in self._standbys and self._standbys[n] < stood)
            ]  # fmt: skip
        for name in joining[:1]:  # one write per tick: each is a new CAS
            if self._write(tuple(sorted({*self.members, name})), joining=name):
                with self._lock:
                    index = self._standbys.get(name)
                    if index is not None:
                        self._count(name, index)
                if index is not None:
                    SyncGate.connected(self, name, index, self._labels_seen.get(name, ""))
                log.info("in-sync set: %s joined: %s", name, ", ".join(self.members))
                return
        for name in lagging[:1]:
            self._drop(name)

    def _drop(self, name: str) -> None:
        with self._lock:
            index = self._counted.pop(name, None)
        if index is not None:
            SyncGate.gone(self, name)  # stop counting it first
        with self._lock:
            rest = sorted(
                (i for n, i in self._counted.items() if n != name and n in self.members),
                reverse=True,
            )
            needed = max(1, self.needed)
            safe = len(rest) >= needed and rest[needed - 1] >= self.covered
            if not safe and index is not None:
                self._count(name, index)
        if not safe:
            if index is not None:
                SyncGate.connected(self, name, index, self._labels_seen.get(name, ""))
            return
        left = tuple(n for n in self.members if n != name)
        if self._write(left):
            log.warning("in-sync set: %s lags and was removed: %s", name, ", ".join(left) or "none")

    def _write(self, names: tuple[str, ...], joining: str = "") -> bool:
        """Stores ``names`` as the set (CAS); whether it did. A failed CAS
        reads the set again (the next tick tries once more)."""
        expected = self.stored if self.stored is not None else self.leadership.read_sync()
        with self._lock:
            ids = self._ids_for(names, joining)
        done = self.leadership.write_sync(names, expected, ids)
        if done is None:
            # Only this thread writes the set of this term: the term ended.
            log.info("in-sync set: not written (this board no longer leads)")
            return False
        self.stored = done
        return True

    def close(self) -> None:
        self._done.set()
        super().close()
