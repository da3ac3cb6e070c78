"""Leadership: one board of a cluster leads, under an etcd lease it renews.

A board campaigns by creating the cluster's leader key (``Keys.leader``)
under a fresh lease, in a transaction that succeeds only if the key is
absent; the key's revision is the term's **epoch**. While it leads it renews
the lease every ``ttl / 3`` seconds and reads the key back. It leads only
until ``until``, a deadline on ``clock()``:

    until = (when the last successful renewal request was *sent*) + TTL - guard

The send time, not the answer's arrival, because etcd starts the lease's new
TTL when its leader *handles* the renewal, which is after we sent it: the
lease cannot run out in etcd before ``send + TTL``, so no other board can
create the leader key before then, however late the answer reaches us (a
slow network, a scheduler, a pause of this process between etcd's answer
and our reading it). Measuring from the answer would stretch our term past
etcd's lease by exactly that delay. ``guard`` covers the drift of two
monotonic clocks over one TTL and the time between asking ``term()`` and
acting on its answer. (An etcd leader change only lengthens leases: the new
etcd leader renews every lease in full.)

A term that begins waits out the one before, unless that one resigned. The
deadline above holds only while etcd keeps a lease for its TTL, and etcd
3.4 before 3.4.28 does not always: an etcd leader stuck on a slow disk
(etcd issues 12528, 15247) may still revoke a lease it thinks ran out after
another member led and renewed it, and the key goes early. Twice CI saw a
board elected 2.7 s before its predecessor's deadline. So the winner of a
campaign holds its key, renewing it, for a full TTL from the moment it won
before it calls the term its own (``elected``): its predecessor's last
renewal was read back before the key went, so its deadline ends within a
TTL of that, whatever etcd did to the lease. The wait is skipped when the
predecessor resigned: a resigning leader stops first, then records its
lease under ``Keys.resigned`` while the key is still its own; the campaign
reads that and ``Keys.term`` (the latest term's lease, which it overwrites)
in the transaction that creates its key. A switchover and a clean stop
hand over at once; a failover takes one TTL longer.

``clock()`` is Linux's CLOCK_BOOTTIME: monotonic like CLOCK_MONOTONIC, but it
also counts the time the machine spent suspended, which CLOCK_MONOTONIC does
not, so a laptop or virtual machine resumed from suspend does not believe
its term still runs while etcd's clock went on (CLOCK_MONOTONIC where there
is no CLOCK_BOOTTIME). It is one clock for every process of the machine.

``term()`` compares ``until`` with the clock *when it is asked*, so a board
fences itself even when this thread is starved or the whole process was
stopped (SIGSTOP) and resumed: its first question after the deadline gets
None, before anyone else can have been elected. A term that lapsed is never
resumed: the thread revokes its lease (when etcd answers again) and
campaigns afresh, so every term has its own epoch, and epochs only grow.

The thread is the only writer of this object's state; other threads ask
``term()``, ``leader()`` and ``wait()``, and may ``resign()`` (switchover)
or write the in-sync standby set (``write_sync``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from msgboard.cluster.etcd import TRANSIENT, Etcd, encode
from msgboard.cluster.keys import Keys, Primary, SyncSet, checked
from msgboard.cluster.standbys import read_sync, write_sync

log = logging.getLogger("msgboard.cluster")

#: The clock of terms (see above).
CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def clock() -> float:
    """Seconds on the clock every term's deadline is measured on."""
    return time.clock_gettime(CLOCK)


@dataclass(frozen=True)
class Term:
    """One term of leadership: its epoch, its lease, and the deadline (on
    ``clock()``) past which the board must not act as the leader."""

    epoch: int
    lease: int
    ttl: int
    until: float

    def valid(self, now: float | None = None) -> bool:
        return (clock() if now is None else now) < self.until


@dataclass(frozen=True)
class Change:
    """What a listener is told: ``elected`` and ``renewed`` (with the new
    ``until``) before the term is published; ``fenced`` (the term lapsed
    unrenewed, ``until`` the moment it did) and ``resigned`` after."""

    kind: Literal["elected", "renewed", "fenced", "resigned"]
    epoch: int
    until: float
    #: clock() when it happened (for ``elected``: once etcd's
    #: answer was in hand, so after the key was created).
    at: float
    reason: str = ""


Listener = Callable[[Change], None]
#: Whether this board may lead, given the in-sync set stored in etcd: False,
#: True, or a list of etcd compares the campaign must also hold (the member
#: keys it judged by, unmoved: ``members.unmoved``), which means True.
Eligible = Callable[[SyncSet | None], "bool | list[dict[str, Any]]"]


class Leadership:
    """Campaigns for ``cluster``'s leadership as the board ``name`` (whose
    clients use ``address``, and whose web console is at ``console``, ""
    if none), in a thread of its own, from ``start()``."""

    def __init__(
        self,
        etcd: str | Sequence[str],
        cluster: str,
        name: str,
        address: str,
        *,
        ttl: int = 3,
        guard: float | None = None,
        eligible: Eligible | None = None,
        listener: Listener | None = None,
        console: str = "",
    ) -> None:
        if ttl < 2:
            raise ValueError(f"ttl {ttl} is under etcd's minimum lease of 2 seconds")
        self.urls = etcd
        self.keys = Keys(cluster)
        self.me = Primary(checked("board", name), address, 0, console)
        self.ttl = ttl
        self.every = ttl / 3
        self.guard = guard if guard is not None else max(0.2, ttl / 10)
        self.eligible = eligible
        self.listener = listener
        self.timeout = min(1.0, self.every)
        self._term: Term | None = None
        self._changed = threading.Condition()
        self._wake = threading.Event()
        self._stopping = False
        self._resign: Term | None = None
        #: Leases of terms that ended, not yet revoked (etcd did not answer).
        self._lapsed: set[int] = set()
        self._hold_until = 0.0
        self._local = threading.local()
        self._thread = threading.Thread(target=self._run, name=f"leadership-{name}", daemon=True)

    # -- asked from any thread --------------------------------------------

    def term(self) -> Term | None:
        """The term this board leads in now, or None: None as soon as the
        clock passes the term's deadline, whatever this thread is doing."""
        t = self._term
        return t if t is not None and t.valid() else None

    def leader(self) -> bool:
        return self.term() is not None

    def wait(self, timeout: float) -> Term | None:
        """The current term, waiting up to ``timeout`` seconds for one."""
        deadline = clock() + timeout
        with self._changed:
            while (t := self.term()) is None:
                left = deadline - clock()
                if left <= 0:
                    return None
                self._changed.wait(min(left, self.every))
            return t

    def resign(self, hold: float = 0.0) -> bool:
        """Ends this board's term now (switchover) and keeps it from
        campaigning again for ``hold`` seconds; False if it was not leading.
        The term ends here, in the caller's thread; the lease is revoked by
        the leadership thread right after, which frees the key at once."""
        with self._changed:
            t = self._term
            self._hold_until = clock() + hold
            if t is None or not t.valid():
                return False
            self._term = None
            self._resign = t
        self._wake.set()
        return True

    def write_sync(
        self,
        standbys: Sequence[str],
        expected: SyncSet | None,
        ids: Mapping[str, str] | None = None,
    ) -> SyncSet | None:
        """Stores the in-sync standby set of this board's term (``ids``: the
        data directory each joined with), if this board still leads and the
        set in etcd is still ``expected`` (None: none was ever written); the
        set stored, or None if either has changed."""
        t = self.term()
        if t is None:
            return None
        return write_sync(self._etcd(), self.keys, t.epoch, standbys, expected, self.me.name, ids)

    def read_sync(self) -> SyncSet | None:
        return read_sync(self._etcd(), self.keys)

    def _etcd(self) -> Etcd:
        """This thread's own client (a requests session is one thread's)."""
        etcd: Etcd | None = getattr(self._local, "etcd", None)
        if etcd is None:
            etcd = self._local.etcd = Etcd(self.urls, timeout=self.timeout)
        return etcd

    def start(self) -> Leadership:
        self._thread.start()
        return self

    def stop(self, resign: bool = True) -> None:
        """Stops campaigning; a leader resigns first (unless ``resign`` is
        False, which leaves its key to run out with its lease)."""
        if resign:
            self.resign()
        else:
            self._term = None
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.ttl + 5 * self.timeout)
        etcd: Etcd | None = getattr(self._local, "etcd", None)
        if etcd is not None:  # the calling thread's, from write_sync/read_sync
            etcd.close()
            self._local.etcd = None

    # -- the leadership thread ----------------------------------------------

    def _run(self) -> None:
        etcd = Etcd(self.urls, timeout=self.timeout)
        try:
            while not self._stopping:
                try:
                    self._round(etcd)
                except TRANSIENT as e:
                    log.info("leadership %s: etcd: %s", self.me.name, e)
                    self._pause(self.every / 2)
                except Exception:
                    # An answer we did not expect must not end the thread:
                    # the clock still fences a term it held; campaign again.
                    log.exception("leadership %s: unexpected error", self.me.name)
                    self._pause(self.every)
        finally:
            self._resigned(etcd)
            etcd.close()

    def _pause(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _round(self, etcd: Etcd) -> None:
        """One look at the leader key: campaign if it is free, else wait for
        it to change (a watch, re-read at least every ``ttl / 3``)."""
        self._resigned(etcd)
        self._revoke_lapsed(etcd)
        held = self._hold_until - clock()
        if held > 0:
            self._pause(held)
            return
        entry, revision = etcd.get(self.keys.leader)
        if entry is not None:
            etcd.watch(self.keys.leader, revision + 1, self.every)
            return
        term = self._campaign(etcd)
        if term is not None:
            self._hold(etcd, term)

    def _campaign(self, etcd: Etcd) -> Term | None:
        compare = [
            {"key": encode(self.keys.leader), "result": "EQUAL", "target": "CREATE",
             "create_revision": 0},
        ]  # fmt: skip
        if self.eligible is not None:
            sync = read_sync(etcd, self.keys)
            verdict = self.eligible(sync)
            if verdict is False:
                self._pause(self.every)
                return None
            compare.append(
                {"key": encode(self.keys.sync), "result": "EQUAL", "target": "MOD",
                 "mod_revision": sync.revision if sync else 0}
            )  # fmt: skip
            if not isinstance(verdict, bool):
                compare.extend(verdict)
        sent = clock()
        grant = etcd.grant(self.ttl)
        until = sent + grant.ttl - self.guard
        try:
            outcome = etcd.txn(
                compare,
                [
                    # The latest term and the latest resigned one, read
                    # before this term's lease replaces the first.
                    {"request_range": {"key": encode(self.keys.term)}},
                    {"request_range": {"key": encode(self.keys.resigned)}},
                    {"request_put": {"key": encode(self.keys.leader),
                                     "value": encode(self.me.value()), "lease": grant.id}},
                    {"request_put": {"key": encode(self.keys.term),
                                     "value": encode(str(grant.id))}},
                    {"request_range": {"key": encode(self.keys.leader)}},
                ],
            )  # fmt: skip
        except TRANSIENT:
            self._revoke(etcd, grant.id)
            raise
        now = clock()
        entry = outcome.read(2)
        if not outcome.succeeded or entry is None or now >= until:
            # Lost the race, or won it too slowly to vouch for the term.
            self._revoke(etcd, grant.id)
            return None
        term = Term(entry.create_revision, grant.id, grant.ttl, until)
        before, resigned = outcome.read(0), outcome.read(1)
        waits = ""
        if before is not None and (resigned is None or resigned.value != before.value):
            # The term before did not resign: wait out its longest deadline.
            waited = self._outwait(etcd, term, now + grant.ttl)
            if waited is None:
                return None
            term, now = waited, clock()
            waits = "it waited out the term before, which did not resign"
        self._tell(Change("elected", term.epoch, term.until, now, waits))
        if not self._publish(term, None):
            self._revoke(etcd, grant.id)
            return None
        log.info("leadership %s: elected, epoch %d", self.me.name, term.epoch)
        return term

    def _outwait(self, etcd: Etcd, term: Term, begins: float) -> Term | None:
        """Holds ``term``'s key, renewing it, until ``begins``; the term
        renewed then, or None (lease revoked) if it was lost meanwhile."""
        while not self._stopping:
            left = begins - clock()
            if left <= 0 and term.valid():
                return term
            self._pause(min(left, self.every))
            renewed = self._renew(etcd, term)
            if isinstance(renewed, str):
                log.info("leadership %s: lost epoch %d before it began: %s",
                         self.me.name, term.epoch, renewed)  # fmt: skip
                break
            term = renewed or term
        self._revoke(etcd, term.lease)
        return None

    def _renew(self, etcd: Etcd, term: Term) -> Term | str | None:
        """One renewal of ``term``'s lease, its key read back: the term with
        its new deadline (itself if that is no later), None if etcd did not
        answer and the deadline has not passed, or why the term is over."""
        sent = clock()
        try:
            ttl = etcd.keepalive(term.lease)
            entry, _ = etcd.get(self.keys.leader) if ttl > 0 else (None, 0)
        except TRANSIENT as e:
            return None if term.valid() else f"it could not renew ({e})"
        if ttl <= 0:
            return "its lease ran out in etcd"
        if entry is None or (entry.create_revision, entry.lease) != (term.epoch, term.lease):
            return "the leader key is no longer its own"
        if not term.valid():
            return "its renewal came back after the term's deadline"
        renewed = Term(term.epoch, term.lease, ttl, sent + ttl - self.guard)
        return renewed if renewed.until > term.until else term

    def _hold(self, etcd: Etcd, term: Term) -> None:
        """Renews the term's lease until it lapses, is lost or is resigned."""
        wait = self.every
        while not self._stopping:
            self._pause(wait)
            wait = self.every
            if self._term is not term:
                return  # resigned: _round revokes
            renewed = self._renew(etcd, term)
            if isinstance(renewed, str):
                self._fence(etcd, term, renewed)
                return
            if renewed is None:
                wait = self.every / 4  # unanswered: the next try may get through in time
                continue
            if renewed is term:
                continue
            self._tell(Change("renewed", term.epoch, renewed.until, clock()))
            if not self._publish(renewed, term):
                return  # resigned meanwhile: _round revokes
            term = renewed

    def _fence(self, etcd: Etcd, term: Term, reason: str) -> None:
        with self._changed:
            if self._term is term:
                self._term = None
        log.warning("leadership %s: fenced, epoch %d: %s", self.me.name, term.epoch, reason)
        self._tell(Change("fenced", term.epoch, term.until, min(term.until, clock()),
                          reason))  # fmt: skip
        self._revoke(etcd, term.lease)

    def _resigned(self, etcd: Etcd) -> None:
        """Revokes the lease of a term resigned from another thread."""
        with self._changed:
            t, self._resign = self._resign, None
        if t is not None:
            self._tell(Change("resigned", t.epoch, t.until, clock()))
            # Stopped already: say so while the key is still ours, so the
            # next leader need not wait out this term (see the top).
            with contextlib.suppress(*TRANSIENT):
                etcd.txn(
                    [{"key": encode(self.keys.leader), "result": "EQUAL", "target": "LEASE",
                      "lease": t.lease}],
                    [{"request_put": {"key": encode(self.keys.resigned),
                                      "value": encode(str(t.lease))}}],
                )  # fmt: skip
            self._revoke(etcd, t.lease)

    def _revoke(self, etcd: Etcd, lease: int) -> None:
        """Revokes ``lease`` now if etcd answers, else at the next round (a
        lease etcd holds through a loss of quorum would otherwise keep the
        key for a whole TTL once the quorum is back)."""
        self._lapsed.add(lease)
        self._revoke_lapsed(etcd)

    def _revoke_lapsed(self, etcd: Etcd) -> None:
        for lapsed in sorted(self._lapsed):
            with contextlib.suppress(*TRANSIENT):
                etcd.revoke(lapsed)
                self._lapsed.discard(lapsed)

    def _publish(self, term: Term, replacing: Term | None) -> bool:
        """Makes ``term`` current if the current one is still ``replacing``
        (a resign or a stop in between wins); whether it did."""
        with self._changed:
            if self._term is not replacing or self._stopping:
                return False
            self._term = term
            self._changed.notify_all()
            return True

    def _tell(self, change: Change) -> None:
        if self.listener is not None:
            self.listener(change)
