"""Builds a small stopped board for the page sweep (two queues, a few
thousand messages, some taken into history) with msgboard's embedded engine.

    /work/main/.venv/bin/python mkboard.py DIR [--jobs N] [--logs N] [--body B]
"""

from __future__ import annotations

import argparse
import sys

from msgboard import Message, QueueSpec
from msgboard.associative import Pattern, template
from msgboard.engine import Board


def build(path: str, jobs: int, logs: int, body: int, take: int) -> None:
    """Posts ``jobs`` messages to ``jobs`` and ``logs`` to ``logs``, then
    takes ``take`` of the jobs (into history)."""
    with Board(path) as board:
        board.create_queue(QueueSpec("jobs", max_history=10_000))
        board.create_queue(QueueSpec("logs"))
        for start in range(0, jobs, 250):
            n = min(250, jobs - start)
            board.post(
                "jobs",
                [
                    Message(
                        tuple=("job", i, f"file-{i}.png"),
                        address=f"img.resize.{i % 7}",
                        body=b"j" * body,
                    )
                    for i in range(start, start + n)
                ],
            )
        for start in range(0, logs, 250):
            n = min(250, logs - start)
            board.post(
                "logs",
                [
                    Message(tuple=("log", i), address="app.log", body=b"l" * body)
                    for i in range(start, start + n)
                ],
            )
        pattern = Pattern(templates=(template("job", int, str),))
        for _ in range(take):
            board.take("jobs", pattern)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--logs", type=int, default=1000)
    p.add_argument("--body", type=int, default=200)
    p.add_argument("--take", type=int, default=500)
    a = p.parse_args(argv)
    build(a.dir, a.jobs, a.logs, a.body, a.take)


if __name__ == "__main__":
    main(sys.argv[1:])
