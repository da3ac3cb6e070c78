"""What replication costs: the first two rows of the board benchmark
(bench/board.py: unary Post, one at a time, and PostStream in batches of
100, 100-byte durable messages) on three boards, alternating in one run:

- ``single``: a board with no replication (no log written);
- ``logged``: a primary writing its operation log, no standby, with
  ``--allow-async`` (the log's own cost);
- ``standby``: a primary and one synchronous standby (each answer waits for
  the standby's fsync), both on this machine.

    .venv/bin/python bench/replication.py [--unary 1000] [--messages 20000] [--rounds 3]

Prints the median (min-max) of each row per board and the ratios to
``single``. Every round starts fresh boards in a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from msgboard import Message
from msgboard.client import Client
from msgboard.testing import ServerProcess

BODY = b"x" * 100
TOKEN = "bench-token"
BOARDS = ("single", "logged", "standby")


@contextmanager
def board(kind: str, tmp: Path) -> Iterator[str]:
    """The address of a fresh board of ``kind``, stopped after."""
    procs = []
    try:
        if kind == "single":
            procs.append(ServerProcess(tmp / "single"))
        elif kind == "logged":
            procs.append(
                ServerProcess(tmp / "logged", "--replication-token", TOKEN, "--allow-async")
            )
        else:
            p = ServerProcess(tmp / "primary", "--replication-token", TOKEN)
            procs.append(p)
            procs.append(
                ServerProcess(
                    tmp / "standby", "--replication-token", TOKEN, "--standby-of", p.address
                )
            )
        yield procs[0].address
    finally:
        for p in reversed(procs):
            p.stop()


def rows(address: str, args: argparse.Namespace) -> dict[str, float]:
    with Client(address, timeout=600) as c:
        c.wait_ready()
        # The first write waits for the standby to connect: not timed.
        c.create_queue("q")
        c.post("q", body=BODY)
        t = time.perf_counter()
        for i in range(args.unary):
            c.post("q", (i,), body=BODY)
        unary = args.unary / (time.perf_counter() - t)
        msgs = [Message(tuple=(i,), body=BODY) for i in range(args.messages)]
        t = time.perf_counter()
        n = len(c.post_many("q", msgs, batch=100))
        stream = n / (time.perf_counter() - t)
    return {"post_unary_per_s": unary, "post_stream_per_s": stream}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--unary", type=int, default=1000)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    got: dict[str, list[dict[str, float]]] = {k: [] for k in BOARDS}
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-repl-") as tmp:
        for r in range(args.rounds):
            for kind in BOARDS:
                where = Path(tmp) / f"{kind}{r}"
                where.mkdir()
                with board(kind, where) as address:
                    got[kind].append(rows(address, args))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(
        f"\n{args.unary:,} unary Posts, {args.messages:,} streamed (batch 100), 100-byte "
        f"durable messages, median (min-max) of {args.rounds} alternating rounds on "
        f"{platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}\n"
    )
    base = {row: statistics.median(f[row] for f in got["single"]) for row in got["single"][0]}
    for row in base:
        print(row)
        for kind in BOARDS:
            vals = [f[row] for f in got[kind]]
            med = statistics.median(vals)
            print(
                f"  {kind:8} {med:10,.0f} msgs/s ({min(vals):,.0f}-{max(vals):,.0f})"
                f"  x{med / base[row]:.2f}"
            )


if __name__ == "__main__":
    main()
