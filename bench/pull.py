"""Federation pull throughput beside a local MOVE, in one run: two boards
served in this process (loopback, fsync on), N messages waiting on
central's queue; the time until a site queue that pulls them (``LINK:QUEUE
--to work``, a translator ``prefix +c.``) holds all N, against the time
until a local MOVE selector on the site moves N waiting messages into
another queue. Rounds alternate the two; prints medians of msgs/s and
their ratio::

    .venv/bin/python bench/pull.py [--messages 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from msgboard import Message
from msgboard.client import Client
from msgboard.testing import ServerThread


def until(what: str, ok: object, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout} s: {what}")
        time.sleep(0.01)


def pull(c: Client, s: Client, r: int, n: int) -> float:
    q = f"w{r}"
    c.create_queue(q)
    s.create_queue(q)
    c.post_many(q, [Message(body=b"x" * 100, address="jobs") for _ in range(n)], batch=500)
    t = time.perf_counter()
    sel = s.create_selector(q, to=q, source_link="central", translator="prefix +c.")
    until("pulled", lambda: s.get_queue(q).unprocessed >= n)
    rate = n / (time.perf_counter() - t)
    s.delete_selector(sel.id)
    return rate


def local(s: Client, r: int, n: int) -> float:
    a, b = f"a{r}", f"b{r}"
    s.create_queue(a)
    s.create_queue(b)
    s.post_many(a, [Message(body=b"x" * 100, address="jobs") for _ in range(n)], batch=500)
    t = time.perf_counter()
    s.create_selector(a, to=b)
    until("moved", lambda: s.get_queue(b).unprocessed >= n)
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list[float]] = {"pull": [], "local MOVE": []}
    with tempfile.TemporaryDirectory() as tmp:
        central = ServerThread(Path(tmp) / "central").start()
        site = ServerThread(Path(tmp) / "site").start()
        try:
            with Client(central.address, timeout=60) as c, Client(site.address, timeout=60) as s:
                s.create_link("central", central.address)
                for r in range(args.rounds):
                    for kind in ("pull", "local MOVE") if r % 2 == 0 else ("local MOVE", "pull"):
                        fig = (
                            pull(c, s, r, args.messages)
                            if kind == "pull"
                            else local(s, r, args.messages)
                        )
                        runs[kind].append(fig)
        finally:
            site.stop()
            central.stop()
    p, m = statistics.median(runs["pull"]), statistics.median(runs["local MOVE"])
    print(f"{args.messages:,} messages, medians of {args.rounds} rounds (loopback, fsync):")
    for kind, xs in runs.items():
        print(f"  {kind:11} {statistics.median(xs):9,.0f} msgs/s   runs {[round(x) for x in xs]}")
    print(f"  pull / local MOVE: {p / m:.2f}")


if __name__ == "__main__":
    main()
