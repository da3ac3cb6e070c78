"""Switchover: a planned change of primary with no failed write
(``msgboard cluster switchover``; docs/cluster.md).

The operator's side (``ask``) picks the board to hand over to (the one
named, which must be in the in-sync set, or the in-sync standby with the
highest published position) and writes the ``switchover`` key under a short
lease, only while the primary it read still leads. The primary's side is
its node's: it sends every new call to its successor (NotPrimary with the
successor's address), waits until the successor has acknowledged its last
log index, and resigns, keeping out of the next election a while. No other
board campaigns while the key stands, and the successor wins a tie of
positions; the lease ends the key if the switchover stalls. ``wait`` follows
the leader key until a later term leads.
"""

from __future__ import annotations

import time

from msgboard.cluster.etcd import Etcd, encode
from msgboard.cluster.keys import Handover, Keys, Primary
from msgboard.cluster.members import read_positions
from msgboard.cluster.standbys import read_sync
from msgboard.errors import FailedPrecondition, Unavailable

#: How long a switchover may take before its key runs out (seconds).
TTL = 30


def read(etcd: Etcd, keys: Keys) -> Handover | None:
    """The switchover asked for, if one stands."""
    entry, _ = etcd.get(keys.switchover)
    return Handover.of(entry)


def ask(etcd: Etcd, keys: Keys, to: str = "", *, ttl: int = TTL) -> tuple[Primary, Handover, int]:
    """Asks the primary to hand over to ``to`` ("": the most caught-up
    in-sync standby); (the primary, the handover, the key's lease)."""
    entry, _ = etcd.get(keys.leader)
    if entry is None:
        raise Unavailable(f"no board leads cluster {keys.cluster} now: nothing to switch over")
    primary = Primary.of(entry)
    sync = read_sync(etcd, keys)
    members = sync.standbys if sync is not None and sync.epoch == primary.epoch else ()
    positions = {p.name: p for p in read_positions(etcd, keys)}
    if to:
        if to == primary.name:
            raise FailedPrecondition(f"{to} leads cluster {keys.cluster} already")
        if to not in members:
            raise FailedPrecondition(
                f"{to} is not in the in-sync set ({', '.join(members) or 'empty'}): "
                "only a standby in sync may take over"
            )
    else:
        candidates = [positions[n] for n in members if n in positions]
        if not candidates:
            raise FailedPrecondition(
                f"no standby of cluster {keys.cluster} is in sync: none can take over"
            )
        to = min(candidates, key=lambda p: (-p.epoch, -p.index, p.name)).name
    if to not in positions:
        raise FailedPrecondition(f"{to} has published no position: is it running?")
    handover = Handover(to, positions[to].address, primary.epoch)
    lease = etcd.grant(ttl).id
    outcome = etcd.txn(
        [{"key": encode(keys.leader), "result": "EQUAL", "target": "CREATE",
          "create_revision": primary.epoch}],
        [{"request_put": {"key": encode(keys.switchover), "value": encode(handover.value()),
                          "lease": lease}}],
    )  # fmt: skip
    if not outcome.succeeded:
        etcd.revoke(lease)
        raise Unavailable(f"the primary of cluster {keys.cluster} changed meanwhile; try again")
    return primary, handover, lease


def wait(etcd: Etcd, keys: Keys, after: Primary, timeout: float) -> Primary:
    """The primary of a term later than ``after``'s, once one leads;
    TimeoutError if none does within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        entry, _ = etcd.get(keys.leader)
        if entry is not None and entry.create_revision > after.epoch:
            return Primary.of(entry)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no new primary within {timeout:g} s")
        time.sleep(0.1)
