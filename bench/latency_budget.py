"""The latency budget of the core path: rows 1 and 4 of ``bench/compare.py``,
stage by stage, from the board's probe (``msgboard/probe.py``).

    .venv/bin/python bench/latency_budget.py [--messages 2000] [--rate 2000] [--seconds 5]

Starts a board (``msgboard serve``, the default durable mode) with
``MSGBOARD_PROBE`` set, so that the server notes a timestamp at each stage
of a post; runs row 1 (``Client.publisher``: one message per request, each
durable before the next) and row 4 (a paced publisher at ``--rate`` for
``--seconds``, one MOVE subscriber acking every 50), noting its own stamps
around each call and delivery; stops the board (SIGTERM: the probe writes
its file), lines the stamps up (the same monotonic clock in every process)
and prints, for each row, each stage's time p50 and p99 in µs (row 1
twice: through ``Client.publisher``, and from a bare grpc.aio client on
one thread, to show what the sync client's threads cost):

  client send -> server read  the client's call, gRPC both sides, the loop's turn
  read -> decoded             the request's messages decoded
  decoded -> writer takes it  checking them, the hand-off (submit) and the
                              writer thread's wake-up
  the group's operations      the post's Python in the write transaction
  commit                      LMDB's commit: data pages, their fdatasync, the meta
                              page (with its own O_DSYNC barrier unless
                              ``DEFER_META_SYNC`` is on)
  meta barrier                with ``DEFER_META_SYNC``: the sync that covers the
                              meta page, ``flush`` (an fdatasync) or the next
                              commit's data sync; 0 without
  release: after work         the held group's after work (deliveries handed out)
  answering -> loop wake      the futures answered, the hand-off to the event
                              loop and its wake-up
  loop -> answer built        the post resumed, its response built
  built -> client read        gRPC's send, both sides, the client's wake-up

and for row 4 the delivery: handed out by the writer (at the release),
built by the loop, read by the subscriber. The writer's stamps are per
group; a post is matched to the first group that began after its hand-off.
The probe costs nothing when ``MSGBOARD_PROBE`` is unset (one test of a
module constant per stage); when set, about a microsecond a stamp.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import grpc
from peers.common import BODY, slots

from msgboard import Message
from msgboard.client import Client
from msgboard.testing import ServerProcess
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

US = 1000  # ns in a µs


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def row1(address: str, n: int) -> list[tuple[int, int]]:
    """Row 1: (send, read) perf_counter_ns of each post."""
    out = []
    with Client(address, timeout=60) as c:
        c.create_queue("budget1")
        with c.publisher() as pub:
            for _ in range(n):
                t = time.perf_counter_ns()
                pub.post("budget1", body=BODY)
                out.append((t, time.perf_counter_ns()))
        c.delete_queue("budget1")
    return out


def row1_aio(address: str, n: int) -> list[tuple[int, int]]:
    """Row 1 from a bare grpc.aio client (no ``msgboard.client``): one
    PostStream, a request written and its answer read per post, on one
    thread. What the sync client's threads cost is the difference."""

    async def run() -> list[tuple[int, int]]:
        out = []
        async with grpc.aio.insecure_channel(address) as ch:
            stub = pb_grpc.BoardStub(ch)
            await stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="budget1a")))
            call = stub.PostStream()
            msg = [pb.Message(body=BODY)]
            for i in range(n):
                t = time.perf_counter_ns()
                await call.write(
                    pb.PostStreamRequest(batch_id=i + 1, queue="budget1a", messages=msg)
                )
                r = await call.read()
                out.append((t, time.perf_counter_ns()))
                assert r.seqs, r
            await call.done_writing()
            await stub.DeleteQueue(pb.DeleteQueueRequest(name="budget1a"))
        return out

    return asyncio.run(run())


def row4(
    address: str, per_s: float, seconds: float
) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Row 4: (send, read, messages) of each call, and the read time of each
    delivery, in order."""
    n = int(per_s * seconds)
    calls: list[tuple[int, int, int]] = []
    reads: list[int] = []
    ready = threading.Event()
    with Client(address, timeout=60) as c:
        c.create_queue("budget4")

        def consume() -> None:
            with Client(address, timeout=60) as sc, sc.subscribe("budget4", credit=100) as sub:
                ready.set()
                for got, d in enumerate(sub, 1):
                    reads.append(time.perf_counter_ns())
                    if got % 50 == 0 or got == n:
                        sub.ack(up_to=d)
                    if got == n:
                        return

        th = threading.Thread(target=consume, daemon=True)
        th.start()
        ready.wait(30)
        with c.publisher() as pub:
            for due in slots(per_s, n):
                t = time.perf_counter_ns()
                pub.post_messages("budget4", [Message(body=BODY) for _ in due])
                calls.append((t, time.perf_counter_ns(), len(due)))
        th.join(60)
        c.delete_queue("budget4")
    return calls, reads


def load(path: Path) -> dict[str, list[tuple[int, int]]]:
    """The probe's marks by stage: (time, count), in time order."""
    by: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for line in path.read_text().splitlines():
        stage, t, count = json.loads(line)
        by[stage].append((t, count))
    for v in by.values():
        v.sort()
    return by


class Marks:
    """The probe's marks of one row's time window, with lookups."""

    def __init__(self, by: dict[str, list[tuple[int, int]]], start: int, end: int) -> None:
        self.by = {k: [m for m in v if start <= m[0] <= end] for k, v in by.items()}
        self.times = {k: [m[0] for m in v] for k, v in self.by.items()}

    def after(self, stage: str, t: int) -> int | None:
        times = self.times.get(stage, [])
        i = bisect.bisect_left(times, t)
        return times[i] if i < len(times) else None

    def each(self, stage: str) -> list[int]:
        """One time per operation (a mark with count k stands for k)."""
        return [t for t, k in self.by.get(stage, []) for _ in range(k)]

    def durable(self, committed: int) -> int | None:
        """When the commit at ``committed`` was covered: the next flush or
        the next commit's end, whichever came first; or, where no group is
        held (``DEFER_META_SYNC`` off: LMDB synced the meta page within the
        commit), the release that follows the commit at once."""
        stages = ("flush", "commit", "answered")
        cands = [x for x in (self.after(st, committed + 1) for st in stages) if x]
        return min(cands) if cands else None


def chains(m: Marks, sends: list[int], reads: list[int]) -> list[dict[str, int]]:
    """Each post's stamps, stage by stage (posts whose stamps do not line
    up are left out)."""
    loop = {s: m.each(s) for s in ("read", "decoded", "wake", "built")}
    out = []
    for i, (send, read) in enumerate(zip(sends, reads, strict=True)):
        try:
            c = {"send": send, "read": loop["read"][i], "decoded": loop["decoded"][i]}
            c["wake"], c["built"], c["client"] = loop["wake"][i], loop["built"][i], read
        except IndexError:
            continue
        group = m.after("group", c["decoded"])
        txn = group and m.after("txn", group)
        commit = txn and m.after("commit", txn)
        durable = commit and m.durable(commit)
        answered = durable and m.after("answered", durable)
        if not (group and txn and commit and durable and answered) or answered > c["wake"]:
            continue
        c.update(group=group, txn=txn, commit=commit, durable=durable, answered=answered)
        if not c["send"] <= c["read"] <= c["decoded"] <= group <= txn <= commit <= durable:
            continue
        out.append(c)
    return out


STAGES = [
    ("client send -> server read", "send", "read"),
    ("read -> decoded", "read", "decoded"),
    ("decoded -> checked, handed off, writer takes it", "decoded", "group"),
    ("the group's operations (txn)", "group", "txn"),
    ("commit: pages, fdatasync, meta page", "txn", "commit"),
    ("meta barrier, when deferred (flush or next commit)", "commit", "durable"),
    ("release: after work", "durable", "answered"),
    ("answering -> event loop wakes", "answered", "wake"),
    ("loop: post resumed, answer built", "wake", "built"),
    ("built -> sent by gRPC, client read", "built", "client"),
    ("total: client send -> client read", "send", "client"),
]


def table(title: str, rows: list[tuple[str, list[float]]]) -> str:
    lines = [f"\n{title}", "", "| stage | p50 µs | p99 µs |", "|---|---:|---:|"]
    for name, xs in rows:
        if xs:
            lines.append(f"| {name} | {_pct(xs, 0.5):,.0f} | {_pct(xs, 0.99):,.0f} |")
    return "\n".join(lines)


def budget(
    m: Marks, sends: list[int], reads: list[int]
) -> tuple[list[tuple[str, list[float]]], int]:
    cs = chains(m, sends, reads)
    return [(name, [(c[b] - c[a]) / US for c in cs]) for name, a, b in STAGES], len(cs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2000, help="row 1's posts")
    p.add_argument("--rate", type=float, default=2000, help="row 4's posts a second")
    p.add_argument("--seconds", type=float, default=5, help="row 4's length")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="msgboard-budget-") as tmp:
        probe = Path(tmp) / "probe.jsonl"
        # The server's probe; this process imported its own, off.
        os.environ["MSGBOARD_PROBE"] = str(probe)
        server = ServerProcess(Path(tmp) / "board")
        del os.environ["MSGBOARD_PROBE"]
        try:
            t1 = time.perf_counter_ns()
            r1 = row1(server.address, args.messages)
            t4 = time.perf_counter_ns()
            calls, dreads = row4(server.address, args.rate, args.seconds)
            t5 = time.perf_counter_ns()
            r1a = row1_aio(server.address, args.messages)
            t6 = time.perf_counter_ns()
        finally:
            server.stop()
        by = load(probe)
    load_avg = os.getloadavg()[0]
    m1 = Marks(by, t1, t4)
    rows, k = budget(m1, [s for s, _ in r1], [r for _, r in r1])
    print(
        table(
            f"Row 1, one post at a time ({k} of {len(r1)} posts lined up; load {load_avg:.1f})",
            rows,
        )
    )
    rows, k = budget(Marks(by, t5, t6), [s for s, _ in r1a], [r for _, r in r1a])
    print(table(f"Row 1 from a bare grpc.aio client, no msgboard.client ({k} of {len(r1a)})", rows))
    m4 = Marks(by, t4, t5)
    rows, k = budget(m4, [s for s, _, _ in calls], [r for _, r, _ in calls])
    # Deliveries: message i's call send, its hand-out by the writer, its
    # send by the loop, its read by the subscriber.
    sends = [s for s, _, n in calls for _ in range(n)]
    handed, dsent = m4.each("deliver"), m4.each("dbuilt")
    d = [
        (sends[i], handed[i], dsent[i], dreads[i])
        for i in range(min(len(sends), len(handed), len(dsent), len(dreads)))
    ]
    rows += [
        ("delivery: client send -> writer hands it out", [(h - s) / US for s, h, _, _ in d]),
        ("delivery: handed out -> loop built its response", [(x - h) / US for _, h, x, _ in d]),
        ("delivery: built -> sent by gRPC, subscriber read", [(r - x) / US for _, _, x, r in d]),
        ("delivery total: client send -> subscriber read", [(r - s) / US for s, _, _, r in d]),
    ]
    per_call = statistics.mean(n for _, _, n in calls) if calls else 0
    print(
        table(
            f"Row 4, {args.rate:,.0f}/s for {args.seconds:g} s "
            f"({k} of {len(calls)} calls lined up, "
            f"{per_call:.2f} messages a call; {len(d)} deliveries; load {load_avg:.1f})",
            rows,
        )
    )


if __name__ == "__main__":
    main()
