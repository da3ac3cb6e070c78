"""The Jepsen-style checker of the fault tests: ``check(history, final,
standbys)`` judges a workload's history (tests/workload.py) against what
the final primary holds (``Dump``) and the directories of its standbys,
and returns one line per violation ([] when there is none):

a. lost: a post answered OK whose key is not on the final primary;
b. duplicate: a key stored more than once;
c. redelivered: a delivery of a key that began after an ack (or a take) of
   it was answered OK; or a key acked OK that waits again on the final
   primary;
d. FIFO, per queue. Post ``a`` *precedes* post ``b`` when ``a`` was
   answered OK before ``b`` was first invoked (any try of ``b``: a retried
   post may have been stored by its first try); concurrent posts have no
   order. Then ``a`` must have a lower seq than ``b``, and ``a`` must be
   delivered first: a violation is ``b``'s first delivery answered before
   any delivery of ``a`` could have begun (or ``a`` still waiting). A
   ``blind`` op on the queue (a take whose answer was lost, a consumer's
   stream lost with deliveries on their way) that began before ``b``'s
   delivery ended and ended after ``a`` was posted may have delivered ``a``
   unseen: that pair is excused;
e. diverged: a standby whose data differs from the final primary's
   (``msgboard.lmdbstore.compare.differences``, the log left out), or on
   which ``msgboard check`` is not clean.

tests/test_jepsen.py shows it each violation, and a clean history passing.
"""

from __future__ import annotations

import bisect
import os
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from msgboard.client import Client, Message
from msgboard.lmdbstore.compare import differences
from tests.workload import OK, Op

INF = float("inf")
#: At most this many lines per rule (the first ones say enough).
MOST = 20


@dataclass(frozen=True)
class Stored:
    """One message the final primary holds: its key, where, which section."""

    key: str
    queue: str
    seq: int
    section: str  # "unprocessed" or "history"


@dataclass
class Dump:
    """What the final primary holds, and its data directory (for the
    comparison with its standbys, once every board is stopped)."""

    path: Path | None
    messages: list[Stored] = field(default_factory=list)


def dump(address: str, path: Path | None, queues: Sequence[str]) -> Dump:
    """Every message of ``queues`` on the board at ``address``, both sections."""
    out = Dump(path)
    with Client(address, timeout=60) as c:
        for q in queues:
            for section, m in browsed(c, q):
                out.messages.append(Stored(m.key or m.body.decode(), q, m.seq, section))
    return out


def browsed(c: Client, queue: str) -> Iterator[tuple[str, Message]]:
    """Every message of ``queue``: its section's name and the message,
    the unprocessed ones first, each section in seq order."""
    for section in ("unprocessed", "history"):
        seq = 0
        while True:
            page = c.browse(queue, "seq" if seq else "oldest", seq=seq, limit=1000, section=section)
            for m in page.messages:
                yield section, m
            if not page.next_seq:
                break
            seq = page.next_seq


def check(history: Sequence[Op], final: Dump, standbys: Sequence[Path] = ()) -> list[str]:
    """Every violation of rules a-e, each a line."""
    return [
        *lost(history, final),
        *duplicates(final),
        *redelivered(history, final),
        *unordered(history, final),
        *diverged(final, standbys),
    ]


def lost(history: Sequence[Op], final: Dump) -> list[str]:
    where = {(m.key, m.queue) for m in final.messages}
    out = []
    for o in history:
        if o.kind == "post" and o.outcome == OK and (o.key, o.queue) not in where:
            out.append(
                f"lost: {o.key} posted to {o.queue} by {o.client}, answered OK at"
                f" {o.done_at:.3f}, is not on the final primary"
            )
    return sorted(set(out))[:MOST]


def duplicates(final: Dump) -> list[str]:
    n = Counter(m.key for m in final.messages)
    out = []
    for key, count in n.items():
        if count > 1:
            places = [f"{m.queue}#{m.seq} ({m.section})" for m in final.messages if m.key == key]
            out.append(f"duplicate: {key} stored {count} times: {', '.join(places)}")
    return out[:MOST]


def redelivered(history: Sequence[Op], final: Dump) -> list[str]:
    acked: dict[str, Op] = {}
    for o in history:
        earlier = o.key not in acked or o.done_at < acked[o.key].done_at
        if o.kind in ("ack", "take") and o.outcome == OK and earlier:
            acked[o.key] = o
    out = []
    for o in history:
        a = acked.get(o.key)
        if o.kind in ("deliver", "take") and o.outcome == OK and a and o.invoked_at > a.done_at:
            out.append(
                f"redelivered: {o.key} delivered to {o.client} from {o.invoked_at:.3f},"
                f" after {a.client}'s ack of it was answered OK at {a.done_at:.3f}"
            )
    for m in final.messages:
        if m.section == "unprocessed" and m.key in acked:
            a = acked[m.key]
            out.append(
                f"redelivered: {m.key} was acked OK by {a.client} at {a.done_at:.3f} and"
                f" waits again on {m.queue} (seq {m.seq})"
            )
    return out[:MOST]


@dataclass
class _Times:
    """What rule d reads from a history, by key."""

    first_try: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)
    queue_of: dict[str, str] = field(default_factory=dict)
    #: The earliest a delivery of the key could have begun, and been seen.
    delivered_from: dict[str, float] = field(default_factory=dict)
    delivered_by: dict[str, float] = field(default_factory=dict)
    blind: dict[str, list[Op]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, history: Sequence[Op]) -> _Times:
        t = cls()
        for o in history:
            if o.kind == "post":
                t.first_try[o.key] = min(t.first_try.get(o.key, INF), o.invoked_at)
                t.queue_of[o.key] = o.queue
                if o.outcome == OK:
                    t.answered[o.key] = min(t.answered.get(o.key, INF), o.done_at)
            elif o.kind in ("deliver", "take") and o.outcome == OK:
                t.delivered_from[o.key] = min(t.delivered_from.get(o.key, INF), o.invoked_at)
                t.delivered_by[o.key] = min(t.delivered_by.get(o.key, INF), o.done_at)
            elif o.kind == "blind":
                t.blind[o.queue].append(o)
        return t


def unordered(history: Sequence[Op], final: Dump) -> list[str]:
    t = _Times.of(history)
    stored = {(m.key, m.queue): m for m in final.messages}
    waiting = {m.key for m in final.messages if m.section == "unprocessed"}
    out: list[str] = []
    for queue in sorted(set(t.queue_of.values())):
        out.extend(_fifo(queue, t, stored, waiting))
    return out[:MOST]


def _fifo(
    queue: str, t: _Times, stored: dict[tuple[str, str], Stored], waiting: set[str]
) -> list[str]:
    """Rule d on one queue, in O(n log n): posts sorted by their answers,
    and for each post the maxima over the posts answered before it."""
    posts = sorted(
        (t.answered[k], k) for k, q in t.queue_of.items() if q == queue and k in t.answered
    )
    times = [at for at, _ in posts]
    blinds = sorted(t.blind[queue], key=lambda b: b.done_at)
    ends = [b.done_at for b in blinds]
    earliest_blind = [INF] * (len(blinds) + 1)  # the least invoked_at of blinds[i:]
    for i in range(len(blinds) - 1, -1, -1):
        earliest_blind[i] = min(earliest_blind[i + 1], blinds[i].invoked_at)

    def bound(key: str) -> float:
        """Before this, no delivery of ``key`` had begun, even unseen."""
        seen = t.delivered_from.get(key, INF)
        if seen == INF and key not in waiting:
            return -INF  # processed unseen (or lost: rule a says so)
        return min(seen, earliest_blind[bisect.bisect_right(ends, t.first_try[key])])

    best_bound: list[tuple[float, str]] = []
    best_seq: list[tuple[int, str]] = []
    for _, k in posts:
        m = stored.get((k, queue))
        b = (bound(k), k) if m is not None else (-INF, k)
        s = (m.seq, k) if m is not None else (-1, k)
        best_bound.append(max(best_bound[-1], b) if best_bound else b)
        best_seq.append(max(best_seq[-1], s) if best_seq else s)
    out = []
    for _, k in posts:
        n = bisect.bisect_left(times, t.first_try[k])  # posts[:n] precede k
        if n == 0:
            continue
        m = stored.get((k, queue))
        seq, before = best_seq[n - 1]
        if m is not None and seq > m.seq:
            out.append(
                f"FIFO: on {queue}, {before} (seq {seq}) was answered before {k} was"
                f" posted, yet {k} has the lower seq {m.seq}"
            )
        by = t.delivered_by.get(k, INF)
        limit, before = best_bound[n - 1]
        if by < limit:
            out.append(
                f"FIFO: on {queue}, {before} was answered before {k} was posted, yet {k}"
                f" was delivered by {by:.3f}, before {before}'s first delivery"
                + (f" began ({limit:.3f})" if limit < INF else " (it waits still)")
            )
    return out


def diverged(final: Dump, standbys: Sequence[Path]) -> list[str]:
    out: list[str] = []
    for s in standbys:
        if final.path is not None:
            out.extend(f"diverged: standby {s.name}: {d}" for d in differences(final.path, s))
        done = subprocess.run(
            [sys.executable, "-m", "msgboard", "check", os.fspath(s)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            lines = (done.stdout + done.stderr).strip().splitlines()
            out.append(f"diverged: msgboard check {s.name} is not clean: {' / '.join(lines)}")
    return out
