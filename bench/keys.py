"""Idempotency keys' cost: scripts/bench-compare's rows 1 and 2 for
msgboard, keyed and unkeyed, alternating in one run against one served
board (the default durable one: every answered post is fsync'd).

Row 1: ``Client.publisher()``, one message per request, one in flight;
row 2: ``Client.post_many``, one PostStream, 100 per request. Keyed runs
give every message its own key (``key=f"k{i}"``). Prints each row's median
msgs/s per variant and the keyed/unkeyed ratio of the medians::

    .venv/bin/python bench/keys.py [--unary 2000] [--messages 20000] [--rounds 3]

``--engine`` measures instead the engine alone (embedded, no gRPC, no
fsync): posts of 1,000 body-only messages, keyed and unkeyed alternating,
and prints the CPU per message of each (median of the rounds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from msgboard import Message
from msgboard.client import Client
from msgboard.testing import ServerProcess

BODY = b"x" * 100


def row1(c: Client, queue: str, n: int, keyed: bool) -> float:
    c.create_queue(queue)
    with c.publisher() as pub:
        t = time.perf_counter()
        for i in range(n):
            pub.post(queue, body=BODY, key=f"k{i}" if keyed else "")
        rate = n / (time.perf_counter() - t)
    c.delete_queue(queue)
    return rate


def row2(c: Client, queue: str, n: int, keyed: bool) -> float:
    msgs = [Message(body=BODY, key=f"k{i}" if keyed else "") for i in range(n)]
    c.create_queue(queue)
    t = time.perf_counter()
    c.post_many(queue, msgs, batch=100)
    rate = n / (time.perf_counter() - t)
    c.delete_queue(queue)
    return rate


def engine(messages: int, rounds: int) -> None:
    from msgboard import QueueSpec
    from msgboard.engine import Board

    per: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp, Board(tmp, sync=False) as b:
        for r in range(rounds):
            for keyed in (False, True) if r % 2 == 0 else (True, False):
                q = f"e-{r}-{keyed}"
                b.create_queue(QueueSpec(q))
                batches = [
                    [Message(body=BODY, key=f"k{i}-{j}" if keyed else "") for j in range(1000)]
                    for i in range(messages // 1000)
                ]
                t = time.process_time()
                for batch in batches:
                    b.post(q, batch)
                per[keyed].append((time.process_time() - t) / messages * 1e6)
                b.delete_queue(q)
    plain, keyed = statistics.median(per[False]), statistics.median(per[True])
    print(
        f"engine: unkeyed {plain:.1f} µs CPU/message, keyed {keyed:.1f} (medians of {rounds}), "
        f"keyed/unkeyed {keyed / plain:.2f}; runs: unkeyed {[round(x, 1) for x in per[False]]}, "
        f"keyed {[round(x, 1) for x in per[True]]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--unary", type=int, default=2000, help="messages of row 1")
    ap.add_argument("--messages", type=int, default=20000, help="messages of row 2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engine", action="store_true", help="the engine alone (see above)")
    args = ap.parse_args()
    if args.engine:
        engine(args.messages, args.rounds)
        return
    figures: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp) / "board")
        try:
            with Client(server.address, timeout=600) as c:
                for r in range(args.rounds):
                    for keyed in (False, True) if r % 2 == 0 else (True, False):
                        for name, fn, n in (("1", row1, args.unary), ("2", row2, args.messages)):
                            q = f"bench-{name}-{r}-{keyed}"
                            figures.setdefault((name, keyed), []).append(fn(c, q, n, keyed))
        finally:
            server.stop()
    for name in ("1", "2"):
        plain = statistics.median(figures[(name, False)])
        keyed = statistics.median(figures[(name, True)])
        print(
            f"row {name}: unkeyed {plain:,.0f} msgs/s, keyed {keyed:,.0f} msgs/s "
            f"(medians of {args.rounds}), keyed/unkeyed {keyed / plain:.2f}; runs: "
            f"unkeyed {[round(x) for x in figures[(name, False)]]}, "
            f"keyed {[round(x) for x in figures[(name, True)]]}"
        )


if __name__ == "__main__":
    main()
