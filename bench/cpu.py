"""The server's CPU per message for scripts/bench-compare's msgboard rows
1, 1b, 2, 3 and 3b: the utime+stime of the ``msgboard serve`` process
(from /proc) spent on each workload, divided by its messages.

On a shared, loaded machine, throughput moves 2-7x between identical runs;
the CPU the server spends on a message moves far less, so this is the
figure to compare two trees by. Run it with each tree's interpreter, in
turns, and compare the medians::

    .venv/bin/python bench/cpu.py [--messages 20000] [--unary 1000]

Prints one JSON object: per row, ``cpu_us`` (server CPU per message) and
``per_s`` (messages per second, for reference).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from peers import board as rows

from msgboard.client import Client
from msgboard.testing import ServerProcess

BODY = b"x" * 100


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid``, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=20_000, help="for rows 2, 3 and 3b")
    p.add_argument("--unary", type=int, default=1_000, help="for rows 1 and 1b")
    args = p.parse_args()
    n, u = args.messages, args.unary
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        server = ServerProcess(Path(d) / "data")
        pid = server.proc.pid

        def measure(name: str, fn: Callable[[], object], count: int) -> None:
            c0, t = cpu_seconds(pid), time.perf_counter()
            fn()
            wall = time.perf_counter() - t
            out[name] = {"cpu_us": (cpu_seconds(pid) - c0) / count * 1e6, "per_s": count / wall}

        try:
            with Client(server.address) as c:
                c.create_queue("p")

                def one() -> None:
                    with c.publisher() as pub:
                        for _ in range(u):
                            pub.post("p", body=BODY)

                def unary() -> None:
                    for _ in range(u):
                        c.post("p", body=BODY)

                measure("1 publish_one", one, u)
                measure("1b publish_one_unary", unary, u)
                measure("2 publish_batch", lambda: c.post_many("p", rows._messages(n)), n)
                c.delete_queue("p")
                for every, name in ((0, "3 consume"), (rows.ACK_EVERY, "3b consume_cumulative")):
                    q = f"c{every}"
                    c.create_queue(q)
                    c.post_many(q, rows._messages(n))

                    def drain(q: str = q, every: int = every) -> None:
                        with c.subscribe(q, credit=100) as sub:
                            rows._drain(sub, n, every)

                    measure(name, drain, n)
                    c.delete_queue(q)
        finally:
            server.kill()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
