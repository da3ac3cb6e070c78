"""Memory benchmark: peak server RSS under a consumer that never reads.

Starts a real ``msgboard serve`` in a child process on a throw-away data
directory (loopback only) and prints the server's peak RSS (VmHWM of
/proc/<pid>/status):

- ``consumer``: a consumer asks for credit 1,000,000 and never reads its
  stream while 200,000 x 1 KiB messages are posted to its queue.

    .venv/bin/python bench/memory.py [consumer] [--messages 200000] [--tree DIR]

``--tree DIR`` runs the server from another checkout (e.g. an older one,
for a before/after); its flags must exist there. A flat-out PostStream's
heap and the figures of a board of 100,000 queues are measured by
``bench/queues.py``. Not a test: it asserts nothing, it prints figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc

from msgboard import Message
from msgboard.client import Client
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", default=["consumer"])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--tree", help="run the server from this checkout")
    args = ap.parse_args()
    tree = os.path.abspath(args.tree) if args.tree else None
    print(f"python {sys.version.split()[0]}, server from {tree or 'this tree'}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, w in enumerate(args.workloads):
            data = Path(tmp) / f"board-{i}"
            if w == "consumer":
                print(consumer(data, tree, args.messages), flush=True)
            else:
                ap.error(f"unknown workload {w!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
