"""Members: each board's position under ``members/``, and the promotion
rule that reads them (docs/plans/cluster/DESIGN.md §5).

``Membership`` publishes this board's position (its log's last index and
that entry's epoch, its address, whether it has stopped following) under a
lease of its own, renewed every ``ttl / 3``: a board that dies drops out
within its TTL. It puts the position at most once a second as it moves,
and at once when asked (``publish``), which a candidate does before it
judges an election.

``promotable`` is the rule: only a member of the in-sync set may be
promoted, and only the highest ``(epoch, index)`` among at least
``|set| - needed + 1`` members that have all *stopped* (their positions
are final: they follow nobody and apply nothing until a new primary is
named). Every answered write is on at least ``needed`` members of the set,
so any ``|set| - needed + 1`` of them include one that holds it, and the
highest holds them all. The campaign compares the mod_revisions of the
member keys it counted, so a member that moved in between voids it. The
one exception, the primary that wrote the set, holds only while it still
has the data it led with (``led``); ``may_discard`` says when a board
that led may throw that data away: once a later term wrote its own set.

Both are pure (no etcd, no disk): the node asks them, and so does the
model of the protocol that tests/cluster_model.py explores.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from msgboard.cluster.etcd import TRANSIENT, Etcd, encode
from msgboard.cluster.keys import Handover, Keys, Position, SyncSet

log = logging.getLogger("msgboard.cluster")

#: The longest a moving position goes unpublished (seconds).
EVERY = 1.0


def read_positions(etcd: Etcd, keys: Keys) -> list[Position]:
    """Every member's published position, by name."""
    entries, _ = etcd.prefixed(keys.members)
    return [Position.of(e) for e in entries]


def promotable(
    me: str,
    sync: SyncSet | None,
    positions: Sequence[Position],
    needed: int,
    favoured: str = "",
    led: int = 0,
) -> list[Position] | None:
    """The positions that make ``me`` the board to promote (the campaign
    compares their revisions), or None if it may not lead now.

    With no set stored (no primary ever wrote one: a new cluster), every
    published member counts and must have stopped. ``needed`` under 1 is
    taken as 1: with no standby required no failover can be safe, so the
    rule still asks for a member that has everything. ``favoured`` (a
    switchover's target) wins a tie of positions.

    ``led``: the first epoch this board led in with the data it holds
    now (its ``led`` file, kept while the data stays: removed when it is
    set aside, seeded over, or lost with the directory), else 0. The
    primary that wrote the set may lead again while it still holds that
    data (a set left empty by a primary that stopped before any standby
    joined would otherwise keep every board from leading): no later
    primary has written a set, so none answered a write, and it holds
    every write it answered itself (``wrote_set``). Named by the set but
    without that data (deposed and set aside, or seeded), it is only a
    board like the others.

    A member counts only while it publishes the data directory it joined
    the set with (``SyncSet.holds``): a board whose disk was lost and that
    starts again empty under the same name is not that member, and is
    neither promoted nor counted until it has joined the set again."""
    needed = max(1, needed)
    if wrote_set(me, led, sync):
        # The primary that wrote the set (and no later one has), with its
        # data: it holds every write it answered, and no other board
        # answered any since.
        return []
    stopped = {p.name: p for p in positions if p.stopped}
    if sync is None:
        counted = list(stopped.values())
        if me not in stopped or len(counted) < len(positions):
            return None
    else:
        if me not in stopped or not sync.holds(stopped[me]):
            return None
        counted = [stopped[n] for n in sync.standbys if n in stopped and sync.holds(stopped[n])]
        if len(counted) < len(sync.standbys) - needed + 1:
            return None
    best = min(counted, key=lambda p: (-p.epoch, -p.index, p.name != favoured, p.name))
    return counted if best.name == me else None


def wrote_set(me: str, led: int, sync: SyncSet | None) -> bool:
    """Whether ``me`` wrote the set stored, ``sync``, and holds the data
    it wrote it with: it has led with that data since ``led`` (0: never),
    at or before the set's epoch."""
    return sync is not None and sync.primary == me and 0 < led <= sync.epoch


def may_discard(me: str, led: int, sync: SyncSet | None) -> bool:
    """Whether the board ``me`` may throw its data away (set it aside and
    seed itself, its log refused by the new primary): always, unless it
    has led with that data (``led``: the first epoch it did, 0: it did
    not, or that data is gone already); then only once another board has
    written its own in-sync set. Until then the set in etcd is the one
    this board wrote (or none), and the rule (``promotable``) may need it
    to lead again: the successor may have lost its lease before naming
    any standby, and answered nothing."""
    return not led or (sync is not None and not wrote_set(me, led, sync))


def unmoved(keys: Keys, positions: Sequence[Position]) -> list[dict[str, Any]]:
    """Compares for a campaign: each member key still at its revision."""
    return [
        {"key": encode(keys.member(p.name)), "result": "EQUAL", "target": "MOD",
         "mod_revision": p.revision}
        for p in positions
    ]  # fmt: skip


class Membership:
    """Publishes ``position()`` as the board ``name``'s member key, under a
    lease of ``ttl`` seconds, from ``start()`` to ``stop()``."""

    def __init__(
        self,
        etcd: str | Sequence[str],
        cluster: str,
        name: str,
        position: Callable[[], Position],
        *,
        ttl: int = 3,
    ) -> None:
        self.urls = etcd
        self.keys = Keys(cluster)
        self.key = self.keys.member(name)
        self.position = position
        self.ttl = ttl
        self._lease = 0
        self._said: Position | None = None
        self._said_at = 0.0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._local = threading.local()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self) -> Membership:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.ttl + 5)
        with contextlib.suppress(*TRANSIENT):
            if self._lease:
                self._etcd().revoke(self._lease)

    def publish(self) -> Position:
        """Puts the position now (any thread); the position put. Raises
        etcd's errors (TRANSIENT) when it cannot."""
        etcd = self._etcd()
        with self._lock:
            if not self._lease:
                self._lease = etcd.grant(self.ttl).id
            p = self.position()
            revision = etcd.put(self.key, p.value(), self._lease)
            self._said, self._said_at = p, time.monotonic()
        return Position(p.name, p.address, p.index, p.epoch, p.stopped, revision)

    def positions(self) -> list[Position]:
        """Every member's published position (any thread)."""
        return read_positions(self._etcd(), self.keys)

    def handover(self) -> Handover | None:
        """The switchover asked for, if one stands (any thread)."""
        entry, _ = self._etcd().get(self.keys.switchover)
        return Handover.of(entry)

    def nudge(self) -> None:
        """The position changed in a way others must see soon (a role change)."""
        self._wake.set()

    def _etcd(self) -> Etcd:
        etcd: Etcd | None = getattr(self._local, "etcd", None)
        if etcd is None:
            etcd = self._local.etcd = Etcd(self.urls, timeout=min(1.0, self.ttl / 3))
        return etcd

    def _run(self) -> None:
        etcd = self._etcd()
        renewed = 0.0
        while not self._stopping:
            try:
                now = time.monotonic()
                if self._lease and now - renewed >= self.ttl / 3:
                    renewed = now
                    if etcd.keepalive(self._lease) <= 0:
                        with self._lock:
                            self._lease = 0  # ran out: a new one, and put again
                            self._said = None
                p = self.position()
                said = self._said
                if said is None or (
                    p != said and (p.stopped != said.stopped or now - self._said_at >= EVERY)
                ):
                    self.publish()
                    renewed = max(renewed, now)
            except TRANSIENT as e:
                log.info("member %s: etcd: %s", self.key, e)
            except Exception:
                log.exception("member %s: unexpected error", self.key)
            self._wake.wait(min(EVERY, self.ttl / 3) / 2)
            self._wake.clear()
