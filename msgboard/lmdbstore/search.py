"""Search: the oldest unprocessed messages that match a pattern, through the
index when it helps, by a bounded scan when it does not.

Both stores file each unprocessed message under the keys of
``msgboard.associative.keys`` (its address, its shape and each field), in
the same transaction as the message, and give a ``Reader`` over one queue's
section and index. A search then:

1. **Plans.** Each lookup the pattern offers costs the number of messages
   filed under its key(s), which both stores count without reading a
   message: the address lookup; and, per alternative template, the cheapest
   of its lookups (each actual field, its shape), summed over the templates
   (the OR is a union; at most ``MAX_ALTERNATIVES`` templates). The
   cheapest option wins; a key range counts only if it spans at most
   ``RANGE_KEYS`` distinct keys. With no option, or
   none cheaper than the whole section, it scans.
2. **Reads** the chosen keys' seq lists merged in seq order (each seq once),
   fetches each candidate and checks the whole pattern on it (filter
   included), so a match is exact whichever key found it.
3. **Stops** after examining ``budget`` candidates (index) or records
   (scan). ``next_seq`` then says where to resume; a later search from that
   seq continues exactly where this one stopped.
"""

from __future__ import annotations

import abc
import heapq
from collections.abc import Generator, Iterator
from contextlib import ExitStack, closing

from msgboard.associative import Pattern
from msgboard.associative.keys import Lookup, address_lookup, template_lookups
from msgboard.message import Message

__all__ = ["FIND_BUDGET", "MAX_ALTERNATIVES", "RANGE_KEYS", "Reader", "Search"]

#: Candidates (or records, scanning) one search examines before it stops.
FIND_BUDGET = 2_000
#: The most distinct keys a key range may span and still be used.
RANGE_KEYS = 256
#: The most alternative templates planned through the index (planning
#: costs a few counts per template); more are matched by a scan.
MAX_ALTERNATIVES = 64
#: A template whose best exact key holds at most this many messages skips
#: the shape range (counting it costs more than reading them).
_FEW = 16


class Reader(abc.ABC):
    """One queue's unprocessed section and its index, inside a transaction."""

    #: How many messages the section holds.
    unprocessed: int

    @abc.abstractmethod
    def count(self, key: bytes) -> int:
        """How many messages are filed under ``key``, without reading them."""

    @abc.abstractmethod
    def keys(self, prefix: bytes) -> Generator[tuple[bytes, int], None, None]:
        """The distinct keys starting with ``prefix``, in order, with counts
        (a generator: closed by its caller when left early)."""

    @abc.abstractmethod
    def seqs(self, key: bytes, start: int) -> Generator[int, None, None]:
        """The seqs filed under ``key``, ascending, from ``start`` included
        (a generator: closed by its caller when left early)."""

    @abc.abstractmethod
    def get(self, seq: int) -> Message | None:
        """The unprocessed message with that seq."""

    @abc.abstractmethod
    def scan(self, start: int) -> Generator[Message, None, None]:
        """The section's messages in seq order from ``start`` included (a
        generator: closed by its caller when left early)."""


def _resolve(r: Reader, lk: Lookup) -> tuple[int, list[bytes]] | None:
    """What a lookup costs and which keys it reads; None if its range spans
    too many keys."""
    if lk.accept is None:
        return r.count(lk.key), [lk.key]
    cost, keys = 0, []
    with closing(r.keys(lk.key)) as found:
        for n, (key, count) in enumerate(found):
            if n >= RANGE_KEYS:
                return None
            if lk.accept(key):
                cost += count
                keys.append(key)
    return cost, keys


def plan(r: Reader, pattern: Pattern) -> tuple[str, int, list[bytes]]:
    """How to search: ("address" or "template", cost, keys) or ("scan", cost, [])."""
    best: tuple[str, int, list[bytes]] = ("scan", r.unprocessed, [])
    lk = address_lookup(pattern.address)
    if lk is not None:
        res = _resolve(r, lk)
        if res is not None and res[0] < best[1]:
            best = ("address", *res)
    if 0 < len(pattern.templates) <= MAX_ALTERNATIVES:
        total, keys = 0, []
        for t in pattern.templates:
            chosen: tuple[int, list[bytes]] | None = None
            for lk in template_lookups(t):
                if chosen is not None and chosen[0] <= _FEW and not lk.exact:
                    break
                res = _resolve(r, lk)
                if res is not None and (chosen is None or res[0] < chosen[0]):
                    chosen = res
            if chosen is None:
                break
            total += chosen[0]
            keys += chosen[1]
        else:
            if total < best[1]:
                best = ("template", total, list(dict.fromkeys(keys)))
    return best


class Search(Iterator[Message]):
    """The matching messages, oldest first, lazily. When iteration ends,
    ``next_seq`` is 0 if the whole section was searched, or the seq to pass
    as ``start`` to resume (the budget ran out). ``plan`` ("address",
    "template" or "scan") and ``examined`` say how it went.

    A search holds cursors of its transaction until it ends or is closed:
    use it in a ``with`` block (or call ``close``) on the thread that made
    it, so that a search left before its end (a chunk full, a first match
    taken) frees its cursors there and then. Nothing refers back to the
    search from its generator, so no reference cycle keeps it for Python's
    cyclic collector, which would free it on whichever thread allocates
    (docs/architecture.md, "What crosses a thread")."""

    def __init__(self, r: Reader, pattern: Pattern, start: int | None, budget: int) -> None:
        self.plan, self.cost, keys = plan(r, pattern)
        self._progress = progress = _Progress()
        first = 0 if start is None else max(start, 0)
        if self.plan == "scan":
            self._it = _scan(r, pattern, first, budget, progress)
        else:
            self._it = _lookup(r, pattern, first, budget, keys, progress)

    @property
    def examined(self) -> int:
        """Candidates (or records, scanning) examined so far."""
        return self._progress.examined

    @property
    def next_seq(self) -> int:
        """The seq to resume from once the budget ran out; 0 otherwise."""
        return self._progress.next_seq

    def __iter__(self) -> Iterator[Message]:
        # A for loop runs the generator itself: no method call per message.
        return self._it

    def __next__(self) -> Message:
        return next(self._it)

    def close(self) -> None:
        """Ends the search now, closing its cursors (idempotent)."""
        self._it.close()

    def __enter__(self) -> Search:
        return self

    def __exit__(self, *exc: object) -> None:
        self._it.close()


class _Progress:
    """What a search's generator tells its ``Search``: the generator holds
    this, not the search (no cycle)."""

    __slots__ = ("examined", "next_seq")

    def __init__(self) -> None:
        self.examined = 0
        self.next_seq = 0


def _scan(
    r: Reader, pattern: Pattern, start: int, budget: int, p: _Progress
) -> Generator[Message, None, None]:
    matches = pattern.matches
    with closing(r.scan(start)) as rows:
        for m in rows:
            if p.examined >= budget:
                p.next_seq = m.seq
                return
            p.examined += 1
            if matches(m):
                yield m


def _lookup(
    r: Reader, pattern: Pattern, start: int, budget: int, keys: list[bytes], p: _Progress
) -> Generator[Message, None, None]:
    if not keys:
        return
    matches = pattern.matches
    with ExitStack() as opened:
        streams = [opened.enter_context(closing(r.seqs(k, start))) for k in keys]
        seqs = streams[0] if len(streams) == 1 else heapq.merge(*streams)
        last = -1
        for seq in seqs:
            if seq == last:
                continue  # filed under two of the keys
            last = seq
            if p.examined >= budget:
                p.next_seq = seq
                return
            p.examined += 1
            m = r.get(seq)
            if m is not None and matches(m):
                yield m
