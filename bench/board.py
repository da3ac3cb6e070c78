"""Board benchmark: durable post and take rates over gRPC, beside the floors.

Starts a real ``msgboard serve`` in a child process on a throw-away data
directory (loopback only), drives it with the Python client, stops it, and
prints one table plus a JSON file (bench/results/board-<time>.json). In the
same run it measures the floors the figures should be read against: raw LMDB
commits with fsync, one message and 100 messages per transaction.

    scripts/bench [--messages 100000] [--unary 5000] [--rounds 3] [--sync fsync]

Each figure is the median of ``--rounds`` runs (min and max beside it); the
server and client share this machine's cores, as they would in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import lmdb
from table import summarize

from msgboard import Message, QueueSpec
from msgboard.client import Client
from msgboard.engine import Board
from msgboard.testing import ServerProcess

BODY = b"x" * 100


def timed(fn: Callable[[], int]) -> float:
    """Runs ``fn`` (which returns how many items it did) and gives items/s."""
    t = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - t)


def raw_lmdb(path: Path, per_txn: int, txns: int) -> float:
    """Messages/s committed by bare py-lmdb with fsync: the physical floor."""
    env = lmdb.open(str(path), map_size=1 << 30, sync=True, max_dbs=1)
    db = env.open_db(b"m")
    t = time.perf_counter()
    seq = 0
    for _ in range(txns):
        with env.begin(write=True, db=db) as txn:
            for _ in range(per_txn):
                seq += 1
                txn.put(seq.to_bytes(12, "big"), BODY)
    rate = seq / (time.perf_counter() - t)
    env.close()
    return rate


def embedded(path: Path, args: argparse.Namespace) -> dict[str, float]:
    """The engine in this process, no gRPC: batched posts and takes."""
    out: dict[str, float] = {}
    with Board(path, sync=args.sync == "fsync") as b:
        b.create_queue(QueueSpec("q"))
        batches = [
            [Message(tuple=(i,), body=BODY) for i in range(args.batch)]
            for _ in range(args.messages // args.batch)
        ]

        def post() -> int:
            futs = [b.post_async("q", batch) for batch in batches]
            return sum(len(f.result()) for f in futs)

        out["embedded_post_per_s"] = timed(post)

        def take() -> int:
            n = 0
            while got := b.take("q", max=100):
                n += len(got)
            return n

        out["embedded_take_100_per_s"] = timed(take)
    return out


def round_once(c: Client, args: argparse.Namespace, r: int) -> dict[str, float]:
    q = f"bench{r}"
    c.create_queue(q)
    out: dict[str, float] = {}

    lat: list[float] = []

    def unary() -> int:
        for i in range(args.unary):
            t = time.perf_counter()
            c.post(q, (i,), body=BODY)
            lat.append(time.perf_counter() - t)
        return args.unary

    out["post_unary_per_s"] = timed(unary)
    lat.sort()
    out["post_unary_p50_ms"] = lat[len(lat) // 2] * 1e3
    out["post_unary_p99_ms"] = lat[int(len(lat) * 0.99)] * 1e3

    msgs = [Message(tuple=(i,), body=BODY) for i in range(args.messages)]

    def stream() -> int:
        return len(c.post_many(q, msgs, batch=args.batch))

    out["post_stream_per_s"] = timed(stream)

    def take_one() -> int:
        for _ in range(args.unary):
            if not c.take(q):
                raise RuntimeError("queue ran dry")
        return args.unary

    out["take_unary_per_s"] = timed(take_one)

    def take_many() -> int:
        n = 0
        while n < args.messages - args.unary:
            got = c.take(q, max=100)
            if not got:
                break
            n += len(got)
        return n

    out["take_100_per_s"] = timed(take_many)
    c.delete_queue(q)
    for credit in (100, 1000):
        out[f"subscribe_{credit}_per_s"] = subscribe_rate(c, f"sub{r}-{credit}", args, credit)
    out.update(latency(c, f"lat{r}", args))
    return out


def subscribe_rate(c: Client, q: str, args: argparse.Namespace, credit: int) -> float:
    """Deliveries/s through Subscribe from a full queue, acked cumulatively
    each half-credit (every message is acked; one ack request per
    credit/2 deliveries)."""
    c.create_queue(q)
    c.post_many(q, [Message(tuple=(i,), body=BODY) for i in range(args.messages)])

    def consume() -> int:
        n = 0
        with c.subscribe(q, credit=credit) as sub:
            for d in sub:
                n += 1
                if n % (credit // 2) == 0 or n == args.messages:
                    sub.ack(up_to=d)
                if n == args.messages:
                    break
        return n

    rate = timed(consume)
    c.delete_queue(q)
    return rate


def latency(c: Client, q: str, args: argparse.Namespace) -> dict[str, float]:
    """Post-to-delivery latency at a steady ``--rate``: one poster posting
    unary Posts on schedule, one MOVE subscriber acking each delivery."""
    c.create_queue(q)
    n = int(args.rate * args.latency_seconds)
    lat: list[float] = []
    ready = threading.Event()

    def consume() -> None:
        with Client(c.address, timeout=600) as c2, c2.subscribe(q, credit=100) as sub:
            ready.set()
            for d in sub:
                lat.append(time.perf_counter() - float(d.message.headers["t"]))
                sub.ack(d)
                if len(lat) == n:
                    break

    t = threading.Thread(target=consume)
    t.start()
    ready.wait()
    start = time.perf_counter()
    for i in range(n):
        due = start + i / args.rate
        while (now := time.perf_counter()) < due:
            time.sleep(min(due - now, 0.001))
        c.post(q, (i,), body=BODY, headers={"t": repr(time.perf_counter())})
    t.join()
    c.delete_queue(q)
    lat.sort()
    return {
        "e2e_p50_ms": lat[len(lat) // 2] * 1e3,
        "e2e_p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
    }


LABELS = [
    ("post_unary_per_s", "Post, one at a time, durable", "msgs/s"),
    ("post_unary_p50_ms", "  latency p50", "ms"),
    ("post_unary_p99_ms", "  latency p99", "ms"),
    ("post_stream_per_s", "PostStream, batches, durable", "msgs/s"),
    ("take_unary_per_s", "Take, one per call", "msgs/s"),
    ("take_100_per_s", "Take, max=100 per call", "msgs/s"),
    ("subscribe_100_per_s", "Subscribe MOVE, credit 100, acked", "msgs/s"),
    ("subscribe_1000_per_s", "Subscribe MOVE, credit 1000, acked", "msgs/s"),
    ("e2e_p50_ms", "Post -> delivery latency p50 (at --rate)", "ms"),
    ("e2e_p99_ms", "Post -> delivery latency p99 (at --rate)", "ms"),
    ("embedded_post_per_s", "engine in-process, batched posts", "msgs/s"),
    ("embedded_take_100_per_s", "engine in-process, take max=100", "msgs/s"),
    ("lmdb_fsync_1_per_s", "floor: raw LMDB, 1 msg/fsync'd txn", "msgs/s"),
    ("lmdb_fsync_100_per_s", "floor: raw LMDB, 100 msgs/fsync'd txn", "msgs/s"),
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000, help="for the batched rows")
    p.add_argument("--unary", type=int, default=5_000, help="for the one-at-a-time rows")
    p.add_argument("--batch", type=int, default=100, help="messages per PostStream request")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", type=float, default=500.0, help="msgs/s for the latency row")
    p.add_argument("--latency-seconds", type=float, default=4.0)
    p.add_argument("--sync", choices=["fsync", "weaker-no-fsync"], default="fsync")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    p.add_argument(
        "--serve",
        action="append",
        default=[],
        help="an argument more for msgboard serve (e.g. --serve=--metrics-listen=127.0.0.1:0)",
    )
    args = p.parse_args()

    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="msgboard-bench-") as tmp:
        server = ServerProcess(Path(tmp) / "board", "--sync", args.sync, *args.serve)
        try:
            with Client(server.address, timeout=600) as c:
                c.wait_ready()
                for r in range(args.rounds):
                    figures = round_once(c, args, r)
                    # The floor, alternating with the board's rounds.
                    floor = Path(tmp) / f"raw{r}"
                    figures.update(embedded(Path(tmp) / f"embedded{r}", args))
                    figures["lmdb_fsync_1_per_s"] = raw_lmdb(floor, 1, 2000)
                    figures["lmdb_fsync_100_per_s"] = raw_lmdb(Path(f"{floor}-100"), 100, 500)
                    rounds.append(figures)
                    print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        finally:
            server.stop()

    print(
        f"\nmsgboard {args.sync}, {args.messages:,} x 100-byte messages (unary rows: "
        f"{args.unary:,}), batch {args.batch}, median of {args.rounds} "
        f"on {platform.node()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}\n"
    )
    rows = summarize(rounds, LABELS)
    ratio_stream = rows["post_stream_per_s"]["median"] / rows["lmdb_fsync_100_per_s"]["median"]
    ratio_unary = rows["post_unary_per_s"]["median"] / rows["lmdb_fsync_1_per_s"]["median"]
    print(f"\nPostStream / raw LMDB at 100 per txn: {ratio_stream:.2f}")
    print(f"unary Post / raw LMDB at 1 per txn:   {ratio_unary:.2f}")
    ratio_grpc = rows["post_stream_per_s"]["median"] / rows["embedded_post_per_s"]["median"]
    print(f"PostStream / engine in-process:       {ratio_grpc:.2f}")
    os.makedirs(args.out, exist_ok=True)
    path = Path(args.out) / f"board-{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps({"args": vars(args), "rows": rows, "rounds": rounds}, indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
