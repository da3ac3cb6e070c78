"""Builds the large boards for the timing measurements, with msgboard's
embedded engine (``sync=False``: building only; the file is the same).

    mkbig.py DIR --mb 100            # ~100 MB data.mdb: two queues, some history
    mkbig.py DIR --queues 100000     # 100,000 queues of 2 messages each
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import Future

from msgboard import Message, QueueSpec
from msgboard.associative import Pattern, template
from msgboard.engine import Board


def by_size(path: str, mb: int, body: int = 700) -> None:
    """Posts batches to two queues until data.mdb reaches ``mb`` MB; takes a
    tenth of the jobs into history on the way."""
    data = os.path.join(path, "data.mdb")
    with Board(path, sync=False, map_size=1 << 31) as board:
        board.create_queue(QueueSpec("jobs", max_history=1_000_000))
        board.create_queue(QueueSpec("logs"))
        pattern = Pattern(templates=(template("job", int, str),))
        i = 0
        pending: list[Future[list[int]]] = []
        while os.path.getsize(data) < mb * 1_000_000:
            for _ in range(8):
                pending.append(
                    board.post_async(
                        "jobs",
                        [
                            Message(
                                tuple=("job", i + j, f"file-{i + j}.png"),
                                address=f"img.resize.{(i + j) % 7}",
                                body=os.urandom(body // 2).hex().encode(),
                            )
                            for j in range(500)
                        ],
                    )
                )
                pending.append(
                    board.post_async(
                        "logs",
                        [
                            Message(tuple=("log", i + j), address="app.log", body=b"l" * body)
                            for j in range(500)
                        ],
                    )
                )
                i += 500
            for f in pending:
                f.result()
            pending.clear()
            for _ in range(5):
                board.take("jobs", pattern)
        print(f"{i} messages per queue", file=sys.stderr)


def by_queues(path: str, queues: int) -> None:
    """``queues`` queues, each with two messages."""
    with Board(path, sync=False, map_size=1 << 30) as board:
        for start in range(0, queues, 1000):
            fs = [
                board.create_queue_async(QueueSpec(f"q{n:06d}"))
                for n in range(start, min(queues, start + 1000))
            ]
            for f in fs:
                f.result()
            ps = [
                board.post_async(f"q{n:06d}", [Message(tuple=("x", n), body=b"b" * 100)] * 2)
                for n in range(start, min(queues, start + 1000))
            ]
            for p in ps:
                p.result()


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--mb", type=int, default=0)
    p.add_argument("--queues", type=int, default=0)
    a = p.parse_args(argv)
    t = time.monotonic()
    if a.queues:
        by_queues(a.dir, a.queues)
    else:
        by_size(a.dir, a.mb)
    print(f"built in {time.monotonic() - t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
