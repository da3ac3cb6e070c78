"""The routing network laid out for drawing: queues as nodes, selectors as
edges labelled with their operation, pattern and credit, consumers (and the
other ends a selector can have) at the ends.

``layout(queues, selectors, consumers)`` gives a ``Graph``: every node with
its box and every edge with its SVG path and label position, worked out
here so that the template only writes ``<rect>``, ``<path>`` and ``<text>``
elements (autoescaped like the rest of the page: no markup is built in
Python). The drawing is layered, left to right, in the way message flow
reads: a queue's column is the longest chain of selectors (and dead-letter
routes) leading to it, so that sources sit on the left and consumers on
the right; within a column, nodes sit near the average height of what
feeds them (one pass, which keeps crossings few for the shapes boards
have: trees and short pipelines). A route that goes back to an earlier
column (a dead-letter queue that feeds its own source again) is drawn as an
arc under the boxes.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from msgboard.associative import Pattern
from msgboard.console.forms import PatternForm, browse_href, href
from msgboard.results import ConsumerView, QueueStats, SelectorView
from msgboard.spec import Op, Role

NODE_W = 200
NODE_H = 46
#: Room between columns for the edges' labels.
COL_GAP = 190
ROW_GAP = 34
MARGIN = 24
#: Longest edge label drawn; the whole is in its tooltip.
LABEL_CHARS = 34
#: The prefix of a crossing selector's outbox queue (``msgboard.links``).
OUTBOX = "$link."


@dataclass(slots=True)
class Node:
    """A box: a queue, a consumer, or another end of a selector (a selector
    with no consumer attached, a DELETE's drop, a BOUNCE's reply-to)."""

    key: str
    kind: str
    label: str
    detail: str
    href: str
    title: str
    rank: int = 0
    x: int = 0
    y: int = 0
    w: int = NODE_W
    h: int = NODE_H


@dataclass(slots=True)
class Edge:
    """A selector (``kind`` its operation) or a queue's dead-letter route
    (``kind`` "dead-letter"), from one node's key to another's."""

    key: str
    source: str
    target: str
    kind: str
    #: The first line: the operation (and role) and the credit.
    label: str
    #: Below: the pattern, whole (``lines``: wrapped at ``LABEL_CHARS``).
    pattern: str
    title: str
    href: str
    lines: list[str] = field(default_factory=list)
    path: str = ""
    #: Where the label goes, and which end of it is there (SVG's
    #: ``text-anchor``).
    lx: float = 0.0
    ly: float = 0.0
    anchor: str = "middle"


@dataclass(slots=True)
class Graph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    width: int = 2 * MARGIN
    height: int = 2 * MARGIN


def pattern_text(p: Pattern) -> str:
    """A pattern in one line of the CLI's notation ("everything" if empty)."""
    f = PatternForm.of_pattern(p)
    parts = [f.address] if f.address else []
    parts += [t for t in f.template.splitlines() if t]
    if f.filter:
        parts.append(f"where {f.filter}")
    return " ".join(parts) or "everything"


def credit_text(v: SelectorView) -> str:
    """The selector's credit as the CLI says it (``unlimited`` or a number;
    a terminal selector's 0 is the board's default window)."""
    spec = v.spec
    amount = spec.window() if spec.terminal else spec.quota()
    return "unlimited" if math.isinf(amount) else str(int(amount))


def _lines(text: str) -> list[str]:
    """``text`` in lines of at most ``LABEL_CHARS``, at spaces where it
    can (a pattern is drawn whole, never cut)."""
    return textwrap.wrap(text, LABEL_CHARS, break_on_hyphens=False) or [text]


def _edge_of(v: SelectorView, target: str) -> Edge:
    spec = v.spec
    op = spec.op.value.upper()
    role = "" if spec.role is Role.NORMAL else f"{spec.role.value} "
    pat = pattern_text(spec.pattern)
    credit = credit_text(v) if spec.op in (Op.MOVE, Op.COPY) else ""
    label = f"{role}{op}" + (f" · credit {credit}" if credit else "")
    title = (
        f"selector {v.id}: {role}{op} from {spec.source} to {spec.destination or 'a consumer'}\n"
        f"pattern: {pat}\n"
        + (f"credit: {credit}\n" if credit else "")
        + f"outstanding {v.outstanding}, delivered {v.delivered}, dropped {v.dropped}"
        + ("" if v.durable else " (session)")
    )
    link = browse_href(spec.source, PatternForm.of_pattern(spec.pattern))
    source = "q:" + spec.source
    if spec.source_link:  # a pull: the queue is on the linked board
        source = f"remote:{spec.source_link}:{spec.source}"
    return Edge(v.id, source, target, spec.op.value, label, pat, title, link, lines=_lines(pat))


def _nodes_and_edges(
    queues: Sequence[QueueStats],
    selectors: Sequence[SelectorView],
    consumers: Sequence[ConsumerView],
) -> tuple[dict[str, Node], list[Edge]]:
    nodes: dict[str, Node] = {}
    for q in queues:
        if q.name.startswith(OUTBOX):
            continue  # a crossing selector's outbox: drawn as its remote queue
        detail = f"{q.unprocessed} waiting · {q.history} history"
        title = (
            f"queue {q.name}: {q.unprocessed} waiting ({q.outstanding} outstanding), "
            f"{q.history} history, {q.dead_lettered} dead-lettered"
        )
        nodes["q:" + q.name] = Node(
            "q:" + q.name, "queue", q.name, detail, browse_href(q.name), title
        )
    by_selector = {c.selector: c for c in consumers}
    edges: list[Edge] = []
    for v in selectors:
        spec = v.spec
        if spec.source_link:  # a pull from a queue of the linked board
            if "q:" + spec.destination not in nodes:
                continue
            _remote(nodes, spec.source_link, spec.source)
            edges.append(_edge_of(v, "q:" + spec.destination))
            continue
        if "q:" + spec.source not in nodes:
            continue  # a queue the listing left out ($sys, or one not visible)
        if spec.destination_link:  # to a queue of the linked board
            target = _remote(nodes, spec.destination_link, spec.destination)
        elif spec.destination:
            target = "q:" + spec.destination
            if target not in nodes:
                continue
        elif spec.op is Op.DELETE:
            target = "end:" + v.id
            nodes[target] = Node(target, "end", "drop", "DELETE", "", f"selector {v.id} drops")
        elif spec.op is Op.BOUNCE:
            target = "end:" + v.id
            nodes[target] = Node(target, "end", "reply-to", "BOUNCE", "", "each message's reply_to")
        elif v.id in by_selector:
            c = by_selector[v.id]
            target = "c:" + c.id
            credit = "unlimited" if math.isinf(c.credit) else str(int(c.credit))
            nodes[target] = Node(
                target,
                "consumer",
                c.id + (f" ({c.identity})" if c.identity else ""),
                f"credit {credit} · out {c.outstanding} · {c.delivered} delivered",
                href("/consumers") + "#" + c.id,
                f"consumer {c.id} from {c.peer or 'in-process'}",
            )
        else:
            target = "end:" + v.id
            nodes[target] = Node(
                target, "end", "(no consumer)", "detached", "", f"durable selector {v.id}"
            )
        edges.append(_edge_of(v, target))
    return nodes, edges


def _remote(nodes: dict[str, Node], link: str, queue: str) -> str:
    """The box of ``queue`` on the board of ``link`` (a crossing selector's
    other end, drawn instead of its internal outbox ``$link.ID``)."""
    key = f"remote:{link}:{queue}"
    if key not in nodes:
        title = f"queue {queue} on the board that link {link} reaches"
        nodes[key] = Node(key, "remote", f"{link}:{queue}", f"over link {link}", "/cluster", title)
    return key


def _ranks(nodes: dict[str, Node], edges: list[Edge]) -> None:
    """Each node's column: the longest chain leading to it, over the edges
    that do not close a cycle (found by a depth-first walk)."""
    out: dict[str, list[str]] = {k: [] for k in nodes}
    for e in edges:
        out[e.source].append(e.target)
    state: dict[str, int] = {}  # 1: on the walk's path, 2: done
    order: list[str] = []
    back: set[tuple[str, str]] = set()
    for root in nodes:
        if root in state:
            continue
        stack = [(root, iter(out[root]))]
        state[root] = 1
        while stack:
            k, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[k] = 2
                order.append(k)
                stack.pop()
            elif state.get(nxt) == 1:
                back.add((k, nxt))
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(out[nxt])))
    for k in reversed(order):  # a topological order of the forward edges
        for t in out[k]:
            if (k, t) not in back and k != t:
                nodes[t].rank = max(nodes[t].rank, nodes[k].rank + 1)


def _centre(nodes: dict[str, Node], feeders: list[str], n: Node) -> tuple[float, str]:
    """Where ``n`` would like to sit: the mean height of the nodes in
    earlier columns that feed it (none: after those that have some)."""
    ys = [nodes[s].y for s in feeders if nodes[s].rank < n.rank]
    return (sum(ys) / len(ys) if ys else math.inf, n.label)


def _place(nodes: dict[str, Node], edges: list[Edge]) -> tuple[int, int]:
    columns: dict[int, list[Node]] = {}
    for n in nodes.values():
        columns.setdefault(n.rank, []).append(n)
    feeds: dict[str, list[str]] = {}
    for e in edges:
        feeds.setdefault(e.target, []).append(e.source)
    height = 0
    for rank in sorted(columns):
        col = columns[rank]
        col.sort(key=lambda n: _centre(nodes, feeds.get(n.key, []), n))
        for i, n in enumerate(col):
            n.x = MARGIN + rank * (NODE_W + COL_GAP)
            n.y = MARGIN + i * (NODE_H + ROW_GAP)
        height = max(height, len(col) * (NODE_H + ROW_GAP) - ROW_GAP)
    width = (max(columns) + 1) * (NODE_W + COL_GAP) - COL_GAP if columns else 0
    return width + 2 * MARGIN, height + 2 * MARGIN + 60  # room for arcs below


def _route(nodes: dict[str, Node], edges: list[Edge]) -> None:
    seen: dict[tuple[str, str], int] = {}
    arriving: dict[str, int] = {}
    for e in edges:
        a, b = nodes[e.source], nodes[e.target]
        n = seen.get((e.source, e.target), 0)
        seen[(e.source, e.target)] = n + 1
        x0: float
        y0: float
        x3: float
        y3: float
        if b.rank > a.rank:
            x0, y0 = a.x + a.w, a.y + a.h / 2
            x3, y3 = b.x, b.y + b.h / 2
            dx = (x3 - x0) / 2
            bend = n * 12
            x1, y1, x2, y2 = x0 + dx, y0 + bend, x3 - dx, y3 + bend
        else:
            # Back to its own column or an earlier one: an arc under the boxes.
            x0, y0 = a.x + a.w / 2 + 10, a.y + a.h
            x3, y3 = b.x + b.w / 2 - 10, b.y + b.h
            drop = 40 + n * 14
            x1, y1, x2, y2 = x0, y0 + drop, x3, y3 + drop
        e.path = f"M {x0:.0f} {y0:.0f} C {x1:.0f} {y1:.0f}, {x2:.0f} {y2:.0f}, {x3:.0f} {y3:.0f}"
        if b.rank > a.rank:
            # The label ends just before the arrow, above the curve where it
            # runs level into its target (edges fanning out of one queue
            # part there, each at its own target's height); edges into the
            # same node stack their labels.
            into = arriving.get(e.target, 0)
            arriving[e.target] = into + 1
            e.lx, e.ly, e.anchor = x3 - 10, y3 - 21 - into * 28, "end"
        else:
            # An arc's label sits at its lowest point (the cubic's middle).
            e.lx = (x0 + 3 * x1 + 3 * x2 + x3) / 8
            e.ly = (y0 + 3 * y1 + 3 * y2 + y3) / 8 - 6


def layout(
    queues: Sequence[QueueStats],
    selectors: Sequence[SelectorView],
    consumers: Sequence[ConsumerView],
    dead_letters: dict[str, str] | None = None,
) -> Graph:
    """The network of ``queues`` (Stats rows), their ``selectors`` and the
    ``consumers`` attached, with each queue's dead-letter route
    (``dead_letters``: queue -> its dead-letter queue) as a dashed edge.
    Selectors and routes to or from a queue not listed are left out (a user
    sees the part of the network they may read)."""
    nodes, edges = _nodes_and_edges(queues, selectors, consumers)
    for q, dlq in sorted((dead_letters or {}).items()):
        if "q:" + q in nodes and "q:" + dlq in nodes:
            edges.append(
                Edge(
                    f"dl:{q}",
                    "q:" + q,
                    "q:" + dlq,
                    "dead-letter",
                    "dead letters",
                    "",
                    f"{q}'s dead letters go to {dlq}",
                    href(f"/deadletters/{quote(dlq, safe='')}"),
                )
            )
    _ranks(nodes, edges)
    width, height = _place(nodes, edges)
    _route(nodes, edges)
    order = sorted(nodes.values(), key=lambda n: (n.rank, n.y))
    return Graph(order, edges, width, height)
