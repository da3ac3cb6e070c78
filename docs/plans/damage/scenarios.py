"""Items 3 and 4 of issue 23 as scenarios: what today's engine does with a
rolled-back or missing data file, and what ``sidecar.startup`` decides.

A board is built (two queues, 400 posts, then 200 takes one commit each),
its marker and commit sidecar written as a store would (the sidecar after
every commit: here once at the end, with the last txn id), and a copy of
``data.mdb`` kept from before the takes. Each scenario damages a copy of
the directory; today's ``Board`` opens it in a forked child and reports
its queues, and ``startup`` says what the proposed store would do.

    python scenarios.py SCRATCH_DIR
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable

import lmdb
from msgboard import Message, QueueSpec
from msgboard.associative import EVERYTHING
from msgboard.engine import Board

import sidecar


def build(path: str) -> str:
    """The board; returns the path of its data file as it was before the
    takes (an "older copy")."""
    with Board(path) as b:
        b.create_queue(QueueSpec("jobs"))
        b.create_queue(QueueSpec("logs"))
        b.post("jobs", [Message(tuple=("job", i)) for i in range(400)])
        b.post("logs", [Message(tuple=("log", i)) for i in range(10)])
        older = os.path.join(os.path.dirname(path), "older.mdb")
        shutil.copy(os.path.join(path, "data.mdb"), older)  # between commits: consistent
        for _ in range(200):
            b.take("jobs", EVERYTHING)
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=16)
    txnid = env.info()["last_txnid"]
    env.close()
    sidecar.write_marker(path, board=0x5EED, created_at=time.time_ns() // 1000)
    fd = os.open(os.path.join(path, "data.mdb"), os.O_RDONLY)
    stat = sidecar.data_stat(fd)
    os.close(fd)
    side = sidecar.Sidecar(path)
    side.write(sidecar.Commit(txnid, 0x5EED, time.time_ns() // 1000, stat))
    side.close()
    return older


def today(path: str) -> str:
    """Today's engine on ``path``, in a forked child: its queues, or how it
    failed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            with Board(path) as b:
                qs = b.list_queues()
                text = ", ".join(f"{q.spec.name} {q.unprocessed} waiting" for q in qs)
                text = text or "an empty board (no queues)"
        except BaseException as e:
            text = f"refused: {type(e).__name__}: {str(e)[:120]}"
        os.write(w, text.encode())
        os._exit(0)
    os.close(w)
    out = b""
    while chunk := os.read(r, 4096):
        out += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return out.decode()


def _swap(d: str) -> None:
    with open(os.path.join(d, "data.mdb"), "r+b") as f:
        a, b = f.read(4096), f.read(4096)
        f.seek(0)
        f.write(b + a)


def _zero_newest(d: str) -> None:
    with open(os.path.join(d, "data.mdb"), "r+b") as f:
        env = lmdb.open(d, readonly=True, lock=False, max_dbs=16)
        slot = env.info()["last_txnid"] % 2
        env.close()
        f.seek(slot * 4096)
        f.write(bytes(4096))


def _put(older: str, d: str) -> None:
    shutil.copy(older, os.path.join(d, "data.mdb"))


def main(scratch: str) -> None:
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    base = os.path.join(scratch, "board")
    older = build(base)
    cases: list[tuple[str, Callable[[str], None], bool]] = [
        ("healthy", lambda d: None, False),
        ("meta pages swapped", _swap, False),
        ("newest meta page zeroed", _zero_newest, False),
        ("older copy of data.mdb put back", lambda d: _put(older, d), False),
        ("data.mdb 0 bytes", lambda d: os.truncate(f"{d}/data.mdb", 0), False),
        ("data.mdb missing", lambda d: os.unlink(f"{d}/data.mdb"), False),
        ("data.mdb missing, --init", lambda d: os.unlink(f"{d}/data.mdb"), True),
    ]
    print("board: jobs 400 posted, 200 taken; logs 10 (sidecar txn = last commit)")
    for name, damage, init in cases:
        d = os.path.join(scratch, "case")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        damage(d)
        try:
            v = sidecar.startup(d, init=init)
            verdict = f"{v.action}: {v.line or v.note}"
            if v.action == "serve":
                verdict += " (verify pages)" if v.verify else " (unchanged: no page walk)"
        except Exception as e:  # NotLmdb and the like: refused too
            verdict = f"refuse: {e}"
        print(f"- {name}\n    today:    {today(d)}\n    proposed: {verdict}")
    v = sidecar.startup(base)
    print(f"- healthy, in place\n    proposed: {v.action} (page walk needed: {v.verify})")
    with open(os.path.join(base, "data.mdb"), "r+b") as f:  # the same bytes, rewritten
        page = f.read(3 * 4096)[2 * 4096 :]
        f.seek(2 * 4096)
        f.write(page)
    v = sidecar.startup(base)
    print(
        "- one page rewritten in place, same bytes\n"
        f"    proposed: {v.action} (page walk needed: {v.verify})"
    )
    fresh = os.path.join(scratch, "fresh")
    os.makedirs(fresh)
    print(f"- an empty directory\n    proposed: {sidecar.startup(fresh).action}")


if __name__ == "__main__":
    main(sys.argv[1])
