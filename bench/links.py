"""Forwarding throughput across a link against a local MOVE, in one run.

Two boards (``msgboard serve`` child processes on loopback, the default
durable settings: every batch fsync'd): ``site`` with a link ``central``
to the other board. Each round, alternating which goes first, runs:

- local: ``--messages`` posted to a queue on ``site`` while no selector
  reads it, then a MOVE selector to another queue on ``site`` created,
  and timed from its creation until the destination holds them all;
- link: the same, the selector's destination ``central:QUEUE`` (a push
  across the link: the outbox, the forwarder, keyed posts to the remote
  board, their answers) timed until the remote queue holds them all.

Prints the median msgs/s of each over ``--rounds`` (with min and max) and
the link/local ratio of the medians::

    .venv/bin/python bench/links.py [--messages 5000] [--rounds 3] [--body 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from table import summarize

from msgboard import Message
from msgboard.client import Client
from tests.linkboards import Boards

#: How often the destination's count is read while waiting (s).
LOOK = 0.01


def filled(c: Client, queue: str, n: int, most: float = 600.0) -> float:
    """Waits until ``queue`` holds ``n`` messages; the time it did (perf_counter)."""
    deadline = time.monotonic() + most
    while True:
        q = c.get_queue(queue)
        if q.unprocessed + q.history >= n:
            return time.perf_counter()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{queue} holds {q.unprocessed + q.history} of {n} after {most} s")
        time.sleep(LOOK)


def one(
    site: Client,
    dest: Client,
    queue: str,
    to: str,
    n: int,
    body: bytes,
    link: Callable[..., object],
) -> float:
    """Posts ``n`` to ``queue``, then makes the selector to ``to``: msgs/s."""
    site.create_queue(queue)
    site.post_many(queue, (Message(body=body, key=f"{queue}-{i}") for i in range(n)), batch=500)
    t = time.perf_counter()
    link(queue, to)
    return n / (filled(dest, to.rpartition(":")[2], n) - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=5000, help="messages a run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of both")
    ap.add_argument("--body", type=int, default=100, help="bytes a body")
    args = ap.parse_args()
    body = b"x" * args.body
    print(
        f"# links bench: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f},"
        f" {args.messages} messages of {args.body} B a run, {args.rounds} rounds"
    )
    with tempfile.TemporaryDirectory(prefix="links-bench-") as tmp:
        boards = Boards(Path(tmp), ["site", "central"])
        try:
            rounds: list[dict[str, float]] = []
            with (
                Client(boards.address("site"), timeout=120) as site,
                Client(boards.address("central"), timeout=120) as central,
            ):
                site.create_link("central", boards.address("central"))

                def selector(queue: str, to: str) -> None:
                    link, _, there = to.rpartition(":")
                    site.create_selector(queue, to=there, link=link)

                for r in range(args.rounds):
                    figures: dict[str, float] = {}
                    order = ("local", "link") if r % 2 == 0 else ("link", "local")
                    for kind in order:
                        q = f"{kind}-{r}"
                        if kind == "local":
                            site.create_queue(f"{q}-to")
                            rate = one(site, site, q, f"{q}-to", args.messages, body, selector)
                        else:
                            central.create_queue(f"{q}-to")
                            rate = one(
                                site, central, q, f"central:{q}-to", args.messages, body, selector
                            )
                        figures[kind] = rate
                    figures["ratio"] = figures["link"] / figures["local"]
                    rounds.append(figures)
            rows = summarize(
                rounds,
                [
                    ("local", "local MOVE (queue to queue on one board)", "msgs/s"),
                    ("link", "MOVE across a link (to another board)", "msgs/s"),
                    ("ratio", "link / local, each round", "ratio"),
                ],
            )
            local = statistics.median(r["local"] for r in rounds)
            link = statistics.median(r["link"] for r in rounds)
            print(
                f"link/local of the medians: {link / local:.2f}"
                f" (link {rows['link']['median']:,.0f} msgs/s,"
                f" local {rows['local']['median']:,.0f} msgs/s)"
            )
        finally:
            boards.close()


if __name__ == "__main__":
    main()
