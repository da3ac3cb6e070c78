"""How fast a client that follows the primary finds a new one: a failover
by hand (docs/replication.md) while a client given [standby, primary]
posts one message at a time, ``--rounds`` times:

- kill -9 the primary, stop the standby (SIGTERM), start a board on the
  standby's directory and address;
- measure from the new board's "serving on" line to the client's first
  answered post after it (``ready``), and from the kill to it (``kill``,
  which includes starting the new board).

    .venv/bin/python bench/client_failover.py [--rounds 5]

Prints the median (min-max) of each, the machine's load average, and
checks that every answered post is on the new board exactly once. Each
round starts fresh boards in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from msgboard.client import Client
from msgboard.testing import ServerProcess

TOKEN = "bench-token"


def one_round(tmp: Path) -> tuple[float, float]:
    """(seconds from the new board's start to the first post answered on
    it, seconds from the kill to it)."""
    p = ServerProcess(tmp / "p", "--replication-token", TOKEN, "--sync-timeout-ms", "60000")
    s = ServerProcess(tmp / "s", "--replication-token", TOKEN, "--standby-of", p.address)
    answered: list[tuple[float, bytes]] = []
    stop = threading.Event()

    def post() -> None:
        with Client([s.address, p.address], failover=120) as c:
            c.create_queue("q")
            i = 0
            while not stop.is_set():
                body = b"%d" % i
                c.post("q", body=body)
                answered.append((time.monotonic(), body))
                i += 1

    poster = threading.Thread(target=post, daemon=True)
    poster.start()
    board = None
    try:
        while len(answered) < 20:
            time.sleep(0.01)
        killed = time.monotonic()
        p.kill()
        s.stop()
        board = ServerProcess(tmp / "s", "--listen", s.address)
        ready = time.monotonic()
        while not any(t > ready for t, _ in answered):
            if not poster.is_alive():
                raise RuntimeError("the poster stopped")
            time.sleep(0.01)
        first = next(t for t, _ in answered if t > ready)
        stop.set()
        poster.join(60)
        with Client(board.address) as c:
            stored = [m.body for m in c.browse("q", limit=10_000).messages]
        bodies = [b for _, b in answered]
        if not set(bodies) <= set(stored):
            raise RuntimeError("an answered post is missing on the new board")
        if len(stored) != len(set(stored)):
            raise RuntimeError("a post is stored twice")
        return first - ready, first - killed
    finally:
        stop.set()
        for proc in (p, s, board):
            if proc is not None:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ready, kill = [], []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            a, b = one_round(Path(tmp))
        ready.append(a)
        kill.append(b)
    for name, xs in (("ready -> first OK post", ready), ("kill -> first OK post", kill)):
        print(f"{name}: median {statistics.median(xs):.2f} s ({min(xs):.2f}-{max(xs):.2f})")
    print("load average:", " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
