"""Forwarding throughput across a link against a local MOVE, in one run.

Two boards (``msgboard serve`` child processes on loopback, the default
durable settings: every batch fsync'd): ``site`` with a link ``central``
to the other board. Each round runs these, each first in turn:

- local: ``--messages`` posted to a queue on ``site`` while no selector
  reads it, then a MOVE selector to another queue on ``site`` created,
  and timed from its creation until the destination holds them all;
- push: the same, the selector's destination ``central:QUEUE`` (the
  outbox, the forwarder, keyed posts to the remote board, their answers),
  timed until the remote queue holds them all;
- pull: the messages posted to a queue on ``central``, then a pull
  selector ``central:QUEUE --to QUEUE`` made on ``site`` (read there, post
  here keyed, take there), timed until the local queue holds them all.

Prints the median msgs/s of each over ``--rounds`` (with min and max),
each round's ratio to the local MOVE and the ratios of the medians::

    .venv/bin/python bench/links.py [--messages 5000] [--rounds 3] [--body 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
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


def run(kind: str, site: Client, central: Client, q: str, n: int, body: bytes) -> float:
    """One run of ``kind``: ``n`` messages posted to the source queue while
    nothing reads it, then the selector made, timed until the destination
    holds them all; msgs/s."""
    source, dest = (
        (central, site) if kind == "pull" else (site, central if kind == "push" else site)
    )
    source.create_queue(q)
    dest.create_queue(f"{q}-to")
    source.post_many(q, (Message(body=body, key=f"{q}-{i}") for i in range(n)), batch=500)
    t = time.perf_counter()
    if kind == "local":
        site.create_selector(q, to=f"{q}-to")
    elif kind == "push":
        site.create_selector(q, to=f"{q}-to", link="central")
    else:
        site.create_selector(q, to=f"{q}-to", source_link="central")
    return n / (filled(dest, f"{q}-to", n) - t)


KINDS = ("local", "push", "pull")
LABELS = [
    ("local", "local MOVE (queue to queue on one board)", "msgs/s"),
    ("push", "MOVE across a link (push to another board)", "msgs/s"),
    ("pull", "pull across a link (federation)", "msgs/s"),
    ("push/local", "push / local, each round", "ratio"),
    ("pull/local", "pull / local, each round", "ratio"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=5000, help="messages a run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each")
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
                for r in range(args.rounds):
                    figures: dict[str, float] = {}
                    for kind in KINDS[r % 3 :] + KINDS[: r % 3]:  # each goes first in turn
                        figures[kind] = run(kind, site, central, f"{kind}-{r}", args.messages, body)
                    figures["push/local"] = figures["push"] / figures["local"]
                    figures["pull/local"] = figures["pull"] / figures["local"]
                    rounds.append(figures)
            summarize(rounds, LABELS)
            local = statistics.median(r["local"] for r in rounds)
            for kind in ("push", "pull"):
                med = statistics.median(r[kind] for r in rounds)
                print(f"{kind}/local of the medians: {med / local:.2f}")
        finally:
            boards.close()


if __name__ == "__main__":
    main()
