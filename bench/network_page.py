"""What drawing the routing network costs (the console's Network page):
``graph.layout`` and the ``network.html`` template for a board of N queues
in a tree (each fed by its parent through a MOVE selector), a consumer on
each, and a dead-letter route from every tenth; both run on a worker
thread when the page is asked for. Medians of ``--runs`` (in-process, no
board: the layout and the page alone).

    .venv/bin/python bench/network_page.py [--queues 300] [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jinja2

from msgboard.console.graph import Graph, layout
from msgboard.results import ConsumerView, QueueStats, SelectorView
from msgboard.spec import SelectorSpec


class _Me:
    """Who the page is rendered for: the open board's visitor."""

    signed_in = True
    open = True
    name = ""

    def may(self, verb: str, queue: str = "") -> bool:
        return True


def board(n: int) -> tuple[list[QueueStats], list[SelectorView], list[ConsumerView]]:
    names = [f"q{i:05}" for i in range(n)]
    rows = [QueueStats(q, False, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) for q in names]
    sels = [
        SelectorView(
            f"s{i}", SelectorSpec(names[(i - 1) // 3], destination=q), True, False, 0, 0, 0
        )
        for i, q in enumerate(names)
        if i
    ]
    sels += [
        SelectorView(f"t{i}", SelectorSpec(q), True, True, 0, 0, 0) for i, q in enumerate(names)
    ]
    cons = [
        ConsumerView(f"con-{i}", "", "", q, f"t{i}", "move", 10, 0, 0, 0)
        for i, q in enumerate(names)
    ]
    return rows, sels, cons


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=300)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    rows, sels, cons = board(args.queues)
    dead = {r.name: rows[0].name for r in rows[1::10]}
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("msgboard.console", "templates"), autoescape=True
    )
    page = env.get_template("network.html")
    laid: list[float] = []
    written: list[float] = []
    g = Graph()
    html = ""
    for _ in range(args.runs):
        t = time.perf_counter()
        g = layout(rows, sels, cons, dead)
        laid.append(time.perf_counter() - t)
        t = time.perf_counter()
        html = page.render(
            g=g, left_out=0, me=_Me(), csrf="", nav=[], path="/network", every_ms=5000
        )
        written.append(time.perf_counter() - t)
    print(
        f"{args.queues} queues: {len(g.nodes)} boxes, {len(g.edges)} arrows; "
        f"layout median {statistics.median(laid) * 1000:.1f} ms, "
        f"page median {statistics.median(written) * 1000:.1f} ms ({len(html) // 1000} KB)"
    )


if __name__ == "__main__":
    main()
