"""Memory and latency benchmark: peak server RSS under two hostile clients,
and post latency while another client lists every queue.

Starts a real ``msgboard serve`` in a child process on a throw-away data
directory (loopback only) for each workload, and prints the server's peak
RSS (VmHWM of /proc/<pid>/status) or latency percentiles:

- ``consumer``: a consumer asks for credit 1,000,000 and never reads its
  stream while 200,000 x 1 KiB messages are posted to its queue;
- ``poststream``: one PostStream client sends batches of 10,000 x 1 KiB
  flat out (it never waits for an answer before sending the next);
- ``listing``: with 100,000 durable queues, one client lists them in a loop
  while another posts one message at a time: post latency p50/p99/max.

    .venv/bin/python bench/memory.py [consumer poststream listing]
        [--messages 200000] [--batches 40] [--queues 100000] [--posts 300]
        [--tree DIR]

``--tree DIR`` runs the server from another checkout (e.g. an older one,
for a before/after); its flags must exist there. Not a test: it asserts
nothing, it prints figures.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from msgboard import Message, QueueSpec
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.testing import ServerProcess
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

KIB = b"x" * 1024
MiB = 1024 * 1024
OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def peak_rss(pid: int) -> int:
    """The process's peak resident set size so far, bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def start(data: Path, tree: str | None, *args: str) -> ServerProcess:
    # Run from the tree: ``python -m`` puts the working directory first.
    prefix = ("env", "-C", tree, f"PYTHONPATH={tree}") if tree else ()
    return ServerProcess(data, "--sync", "weaker-no-fsync", *args, prefix=prefix)


def consumer(data: Path, tree: str | None, messages: int) -> str:
    """A consumer with credit 1,000,000 that never reads; ``messages`` x 1 KiB."""
    server = start(data, tree)
    try:
        with Client(server.address) as c, grpc.insecure_channel(server.address, OPTIONS) as ch:
            c.create_queue("q")
            opened = pb.SubscribeRequest(open=pb.Subscription(queue="q", credit=1_000_000))
            stop = threading.Event()

            def requests() -> Iterator[pb.SubscribeRequest]:
                yield opened
                stop.wait()

            call = pb_grpc.BoardStub(ch).Subscribe(requests())
            first = next(call)  # `subscribed`; then it never reads again
            with c.publisher() as pub:
                for i in range(0, messages, 1000):
                    pub.post_messages(
                        "q", [Message(tuple=("m", i + k), body=KIB) for k in range(1000)]
                    )
            time.sleep(1)  # let the deliveries it will make go out
            rss = peak_rss(server.proc.pid)
            held = c.stats("q").queues[0].outstanding
            stop.set()
            call.cancel()
        return (
            f"consumer: credit asked 1,000,000, effective {first.credit or 'uncapped'}; "
            f"{messages:,} x 1 KiB posted; {held:,} outstanding; "
            f"server peak RSS {rss / MiB:.0f} MiB"
        )
    finally:
        server.stop()


def poststream(data: Path, tree: str | None, batches: int) -> str:
    """One PostStream client sending ``batches`` x 10,000 x 1 KiB flat out."""
    server = start(data, tree)
    try:
        with Client(server.address) as c, grpc.insecure_channel(server.address, OPTIONS) as ch:
            c.create_queue("q")
            batch = [pb.Message(body=KIB) for _ in range(10_000)]

            def requests() -> Iterator[pb.PostStreamRequest]:
                for i in range(batches):
                    yield pb.PostStreamRequest(batch_id=i, queue="q", messages=batch)

            t = time.perf_counter()
            answers = list(pb_grpc.BoardStub(ch).PostStream(requests()))
            took = time.perf_counter() - t
            rss = peak_rss(server.proc.pid)
            errors = sum(1 for r in answers if r.HasField("error"))
        n = batches * 10_000
        return (
            f"poststream: {batches} batches of 10,000 x 1 KiB in {took:.1f} s "
            f"({n / took:,.0f} msgs/s, {errors} errors); server peak RSS {rss / MiB:.0f} MiB"
        )
    finally:
        server.stop()


def listing(data: Path, tree: str | None, queues: int, posts: int) -> str:
    """Post latency with and without a client listing ``queues`` queues in a loop."""
    with Board(data, sync=False) as board:
        futs = [board.create_queue_async(QueueSpec(f"q{i:06}")) for i in range(queues)]
        for f in futs:
            f.result()
    server = start(data, tree)
    try:
        with Client(server.address) as c:
            idle = _latencies(c, posts)
            busy = {}
            for name in ("ListQueues", "Stats"):
                # The lister is a process of its own: decoding its answers
                # here would take this process's GIL from the poster.
                ctx = multiprocessing.get_context("spawn")
                stop, calls = ctx.Event(), ctx.Value("i", 0)
                p = ctx.Process(target=_lister, args=(server.address, name, stop, calls))
                p.start()
                while calls.value == 0 and p.is_alive():  # it is under way
                    time.sleep(0.05)
                lat = _latencies(c, posts)
                stop.set()
                p.join()
                busy[name] = (lat, calls.value)
        lines = [f"listing: {queues:,} queues; post latency idle: {_pct(idle)}"]
        for name, (lat, n) in busy.items():
            lines.append(f"  while another client calls {name} in a loop ({n} calls): {_pct(lat)}")
        return "\n".join(lines)
    finally:
        server.stop()


def _lister(address: str, name: str, stop: Any, calls: Any) -> None:
    with grpc.insecure_channel(address, OPTIONS) as ch:
        stub = pb_grpc.BoardStub(ch)
        while not stop.is_set():
            if name == "ListQueues":
                stub.ListQueues(pb.ListQueuesRequest())
            else:
                stub.Stats(pb.StatsRequest())
            with calls.get_lock():
                calls.value += 1


def _latencies(c: Client, n: int) -> list[float]:
    out = []
    for i in range(n):
        t = time.perf_counter()
        c.post("q000000", ("p", i))
        out.append(time.perf_counter() - t)
    return out


def _pct(xs: list[float]) -> str:
    xs = sorted(xs)
    p = statistics.quantiles(xs, n=100)
    return f"p50 {p[49] * 1e3:.1f} ms, p99 {p[98] * 1e3:.1f} ms, max {xs[-1] * 1e3:.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", default=["consumer", "poststream", "listing"])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--queues", type=int, default=100_000)
    ap.add_argument("--posts", type=int, default=300)
    ap.add_argument("--tree", help="run the server from this checkout")
    args = ap.parse_args()
    tree = os.path.abspath(args.tree) if args.tree else None
    print(f"python {sys.version.split()[0]}, server from {tree or 'this tree'}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, w in enumerate(args.workloads):
            data = Path(tmp) / f"board-{i}"
            if w == "consumer":
                print(consumer(data, tree, args.messages), flush=True)
            elif w == "poststream":
                print(poststream(data, tree, args.batches), flush=True)
            elif w == "listing":
                print(listing(data, tree, args.queues, args.posts), flush=True)
            else:
                ap.error(f"unknown workload {w!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
