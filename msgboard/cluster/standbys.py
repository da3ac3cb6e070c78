"""Standbys: the in-sync standby set, stored in etcd under ``Keys.sync``.

The primary writes the set before it counts on a standby (so that a board
the primary waits for is always one etcd says may be promoted) and after it
stops counting on one (so that a standby left behind is never promoted). A
write is a compare-and-swap on two revisions in one etcd transaction:

- the leader key's ``create_revision`` must be the writer's epoch: only the
  primary of the current term can change the set, and a deposed primary's
  late write fails even if its process does not yet know it was deposed;
- the sync key's ``mod_revision`` must be the one the writer last read: two
  writes from one primary cannot undo each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from msgboard.cluster.etcd import Etcd, encode
from msgboard.cluster.keys import Keys, SyncSet, checked


def read_sync(etcd: Etcd, keys: Keys) -> SyncSet | None:
    """The set stored, or None if no primary ever wrote one."""
    entry, _ = etcd.get(keys.sync)
    return SyncSet.of(entry)


def write_sync(
    etcd: Etcd,
    keys: Keys,
    epoch: int,
    standbys: Sequence[str],
    expected: SyncSet | None,
    primary: str = "",
    ids: Mapping[str, str] | None = None,
) -> SyncSet | None:
    """Stores ``standbys`` as the set of the primary of ``epoch`` (named
    ``primary``; ``ids``: the data directory each joined with, by name) if
    that primary still holds the leader key and the stored set is still
    ``expected`` (None: never written); the set stored, or None if not."""
    names = tuple(sorted({checked("standby", n) for n in standbys}))
    known = tuple((n, i) for n, i in sorted((ids or {}).items()) if n in names and i)
    value = SyncSet(epoch, names, primary=primary, ids=known).value()
    outcome = etcd.txn(
        [
            {"key": encode(keys.leader), "result": "EQUAL", "target": "CREATE",
             "create_revision": epoch},
            {"key": encode(keys.sync), "result": "EQUAL", "target": "MOD",
             "mod_revision": expected.revision if expected else 0},
        ],
        [
            {"request_put": {"key": encode(keys.sync), "value": encode(value)}},
            {"request_range": {"key": encode(keys.sync)}},
        ],
    )  # fmt: skip
    return SyncSet.of(outcome.read(0)) if outcome.succeeded else None
