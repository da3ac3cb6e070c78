"""The checker of the kill tests across boards (tests/test_links_faults.py,
bench/links_jepsen.py): ``check(history, flows, arrived, ids)`` judges
the posts of a workload (tests/workload.py) against what the destination
queues of the links hold at the end, and returns one line per violation
([] when there is none).

A ``Flow`` is one way messages go across a link: the posts of one writer
(a ``Workload`` named ``writer``) to a queue of one board must arrive at
a queue of another board (a push selector's MOVE or COPY, or a pull).
An ``Arrived`` is one message a destination queue holds; its origin
headers (``x-origin-board``, ``-queue``, ``-seq``), or else its link key
(``link:<board id>:<queue>:<seq>``, see docs/links.md), say where it
came from. Which post it is: the post the source board answered with
that seq, else the producer's key the link kept in a header
(``x-origin-key``), else its body (the workload's body is its key).

For each flow, over the arrivals from its source at its destination:

a. lost: a post answered OK that did not arrive;
b. duplicate: a post that arrived more than once;
c. reordered: a first arrival stored at the destination after another
   one whose origin seq is higher (the destination sees a source queue's
   messages in source seq order);
d. changed: an arrival whose body is not the one posted, or that lacks
   the address or a header the flow's translator gives, or whose
   idempotency key is no link key;
e. stray: at a flow's destination, an arrival no post explains: from a
   board and queue no flow comes from, or of a key its writer never
   posted, or whose every post was refused.

And ``behind(views)``, once everything arrived, over what each board's
``ListLinks`` says of its links:

f. behind: a link that still counts messages waiting to cross or in
   flight, or is not connected.

tests/test_links_checker.py shows it each violation, and a clean run
passing.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from msgboard.results import LinkView
from tests.workload import FAIL, OK, Op

#: At most this many lines per rule and flow (the first ones say enough).
MOST = 20
#: A forwarded message's idempotency key (the queue name may hold ':').
LINK_KEY = re.compile(r"^link:(?P<board>[^:]*):(?P<queue>.*):(?P<seq>\d+)$")
#: Headers in which a link may keep the producer's own key.
KEY_HEADERS = ("x-origin-key", "x-msgboard-key")
#: Where a forwarded message was first posted (board id, queue, seq).
ORIGIN_BOARD, ORIGIN_QUEUE, ORIGIN_SEQ = "x-origin-board", "x-origin-queue", "x-origin-seq"


def origin(key: str, headers: Mapping[str, str]) -> tuple[str, str, int] | None:
    """Where a forwarded message comes from (origin board id, queue, seq):
    from the origin headers a link sets, else from its link key."""
    h = headers
    if h.get(ORIGIN_BOARD) and h.get(ORIGIN_QUEUE) and h.get(ORIGIN_SEQ, "").isdigit():
        return (h[ORIGIN_BOARD], h[ORIGIN_QUEUE], int(h[ORIGIN_SEQ]))
    m = LINK_KEY.match(key)
    return (m["board"], m["queue"], int(m["seq"])) if m else None


@dataclass(frozen=True)
class Arrived:
    """One message a destination queue holds (either section)."""

    board: str
    queue: str
    seq: int
    #: Its idempotency key at the destination: the link key.
    key: str
    body: bytes
    address: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def origin(self) -> tuple[str, str, int] | None:
        return origin(self.key, self.headers)

    @property
    def where(self) -> str:
        return f"{self.board}/{self.queue}#{self.seq}"


@dataclass(frozen=True)
class Flow:
    """Posts of ``writer`` to queue ``source`` (board, queue) arrive at
    ``destination`` (board, queue); with ``address``, each with that
    address; each with the ``headers`` given."""

    writer: str
    source: tuple[str, str]
    destination: tuple[str, str]
    address: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "{}/{} -> {}/{}".format(*self.source, *self.destination)

    def posts(self, history: Sequence[Op]) -> list[Op]:
        """The writer's posts (every try) to the source queue."""
        return [
            o
            for o in history
            if o.kind == "post"
            and o.client.startswith(self.writer + "-")
            and o.queue == self.source[1]
        ]


def check(
    history: Sequence[Op],
    flows: Sequence[Flow],
    arrived: Sequence[Arrived],
    ids: Mapping[str, str],
) -> list[str]:
    """Every violation of rules a-e, each a line. ``ids``: each board's
    id (``Board.board_id``) by the name the flows use."""
    out: list[str] = []
    for flow in flows:
        out.extend(_flow(flow, history, _from(flow, arrived, ids)))
    out.extend(_strays(flows, arrived, ids))
    return out


def _from(flow: Flow, arrived: Sequence[Arrived], ids: Mapping[str, str]) -> list[Arrived]:
    """The flow's arrivals, in destination seq order."""
    origin = (ids[flow.source[0]], flow.source[1])
    here = [
        a
        for a in arrived
        if (a.board, a.queue) == flow.destination and (a.origin or ("",))[:2] == origin
    ]
    return sorted(here, key=lambda a: a.seq)


@dataclass
class _Posts:
    """A flow's posts by key: answered OK (with the seq the source gave),
    and tried at all."""

    ok: dict[str, Op] = field(default_factory=dict)
    by_seq: dict[int, str] = field(default_factory=dict)
    tried: set[str] = field(default_factory=set)
    refused_only: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, posts: Sequence[Op]) -> _Posts:
        p = cls()
        outcomes: dict[str, set[str]] = defaultdict(set)
        for o in posts:
            p.tried.add(o.key)
            outcomes[o.key].add(o.outcome)
            if o.outcome == OK and o.key not in p.ok:
                p.ok[o.key] = o
                p.by_seq[o.seq] = o.key
        p.refused_only = {k for k, seen in outcomes.items() if seen == {FAIL}}
        return p

    def key_of(self, a: Arrived) -> str:
        """Which post ``a`` is (see the module docstring)."""
        origin = a.origin
        if origin is not None and origin[2] in self.by_seq:
            return self.by_seq[origin[2]]
        for h in KEY_HEADERS:
            if a.headers.get(h):
                return a.headers[h]
        return a.body.decode(errors="replace")


def _flow(flow: Flow, history: Sequence[Op], here: list[Arrived]) -> list[str]:
    posts = _Posts.of(flow.posts(history))
    keyed = [(posts.key_of(a), a) for a in here]
    where: dict[str, list[Arrived]] = defaultdict(list)
    for k, a in keyed:
        where[k].append(a)
    lost = [
        f"lost: {k} posted to {flow.source[0]}/{flow.source[1]} (seq {o.seq}), answered OK"
        f" at {o.done_at:.3f}, did not arrive ({flow.name})"
        for k, o in posts.ok.items()
        if k not in where
    ]
    duplicates = [
        f"duplicate: {k} arrived {len(at)} times ({flow.name}): {', '.join(a.where for a in at)}"
        for k, at in where.items()
        if len(at) > 1
    ]
    reordered = []
    top: tuple[int, Arrived] | None = None  # the highest origin seq so far, and where
    for k, a in keyed:
        if a is not where[k][0]:
            continue  # a second arrival: rule b's
        seq = (a.origin or ("", "", 0))[2]
        if top is not None and seq < top[0]:
            reordered.append(
                f"reordered: {a.where} (origin seq {seq}) arrived after"
                f" {top[1].where} (origin seq {top[0]}) ({flow.name})"
            )
        elif top is None or seq > top[0]:
            top = (seq, a)
    changed = []
    for k, a in keyed:
        why = _changed(flow, k, a)
        if why:
            changed.append(f"changed: {k} at {a.where}: {why} ({flow.name})")
    strays = [
        f"stray: {a.where} ({a.key}) is {k}, which {flow.writer} never posted"
        + (" (every post of it was refused)" if k in posts.refused_only else "")
        + f" ({flow.name})"
        for k, a in keyed
        if k not in posts.tried or k in posts.refused_only
    ]
    return [
        *lost[:MOST],
        *duplicates[:MOST],
        *reordered[:MOST],
        *changed[:MOST],
        *strays[:MOST],
    ]


def _changed(flow: Flow, key: str, a: Arrived) -> str:
    """Why ``a`` is not the post ``key`` as the flow delivers it ("": it is)."""
    if a.body != key.encode():
        return f"the body is {a.body[:40]!r}, posted {key.encode()[:40]!r}"
    if flow.address is not None and a.address != flow.address:
        return f"the address is {a.address!r}, not {flow.address!r}"
    for name, value in flow.headers.items():
        if a.headers.get(name) != value:
            return f"header {name} is {a.headers.get(name)!r}, not {value!r}"
    if not LINK_KEY.match(a.key):
        return f"its key {a.key!r} is no link key (a resend would be stored again)"
    return ""


def _strays(flows: Sequence[Flow], arrived: Sequence[Arrived], ids: Mapping[str, str]) -> list[str]:
    """Arrivals at a flow's destination from no flow's source."""
    sources: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for f in flows:
        sources[f.destination].add((ids[f.source[0]], f.source[1]))
    out = []
    for a in arrived:
        known = sources.get((a.board, a.queue))
        if known is not None and (a.origin or ("",))[:2] not in known:
            out.append(f"stray: {a.where} ({a.key or 'no key'}) comes from no flow's source")
    return out[:MOST]


def behind(views: Mapping[str, Sequence[LinkView]]) -> list[str]:
    """Rule f over each board's links (by board name)."""
    out = []
    for board, links in views.items():
        for v in links:
            if v.lag_messages or v.in_flight:
                out.append(
                    f"behind: link {v.spec.name} of {board} counts {v.lag_messages} waiting"
                    f" and {v.in_flight} in flight once everything arrived"
                )
            elif not v.connected:
                out.append(f"behind: link {v.spec.name} of {board} is {v.state}: {v.last_error}")
    return out[:MOST]


def counts(lines: Sequence[str]) -> Counter[str]:
    """How many lines of each rule (``lost``, ``duplicate``...)."""
    return Counter(line.split(":", 1)[0] for line in lines)
