"""Scaling benchmark: does matching cost stay flat as the board grows?

Three rows, each measured side by side in one run:

1. **Take by template** on queues of 10^3, 10^4, 10^5 and 10^6 waiting
   tuples ``("item", i, payload)``, through the engine in this process: each
   take asks for ``("item", i, ANY)`` with a random ``i`` (found through the
   field index), and the taken tuple is posted again so the queue keeps its
   size. The four queues live on one board and are measured in turns, so
   machine noise falls on all of them alike. p50 and p99 per queue, and the
   ratio of the largest queue's p50 to the smallest's (goal: at most 2).
   Beside it, for reference, a Read by a range that no key narrows (the
   bounded fallback scan) on the smaller queues.
2. **Restart** of that board (about 1.1 million messages): ``Board(path)``
   until its first Take answers (goal: under 2 s; opening reads no message).
3. **Routing through the pattern index**, at the index level: one message
   against 10, 1,000 and 10,000 patterns, half eq addresses and half
   topics, via ``PatternIndex.match`` and, beside it, via a loop calling
   ``Pattern.matches`` on every pattern.
4. **Post through selectors**: posts/s into a queue with 10, 1,000 and
   10,000 selectors (half eq, half topic, each a MOVE to one of ten queues),
   through the engine, each message matching one selector; the ratio of the
   fewest selectors' rate to the most's (goal: at most 2).

    .venv/bin/python bench/scaling.py [--sizes 1000,10000,100000,1000000]
        [--takes 2000] [--sync weaker-no-fsync]

Building the board (batches of 1,000 posts) is not what is measured; its
rate is printed for information. Takes run with ``--sync weaker-no-fsync``
by default, so that an fsync (about 0.5 ms here, the same at every size)
does not hide the search's own cost; ``--sync fsync`` measures it too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from msgboard import Message, QueueSpec
from msgboard.associative import ANY, AddressPattern, Pattern, Range, template
from msgboard.associative.index import PatternIndex
from msgboard.engine import Board
from msgboard.spec import SelectorSpec

PAYLOAD = "p" * 40
BODY = b"x" * 100


def item(i: int) -> Message:
    return Message(tuple=("item", i, PAYLOAD), address=f"items.{i % 100}", body=BODY)


def build(board: Board, name: str, n: int) -> float:
    """Fills a queue with n items in batches of 1,000; gives posts/s."""
    board.create_queue(QueueSpec(name))
    t = time.perf_counter()
    futs = []
    for first in range(0, n, 1000):
        futs.append(board.post_async(name, [item(i) for i in range(first, min(n, first + 1000))]))
        if len(futs) >= 8:
            futs.pop(0).result()
    for f in futs:
        f.result()
    return n / (time.perf_counter() - t)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def takes(
    board: Board, sizes: list[int], rounds: int, rng: random.Random
) -> dict[int, list[float]]:
    """Take-by-template latencies (µs) per queue size, measured in turns."""
    lat: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            i = rng.randrange(n)
            pattern = Pattern(templates=(template("item", i, ANY),))
            t = time.perf_counter_ns()
            got = board.take(f"q{n}", pattern)
            lat[n].append((time.perf_counter_ns() - t) / 1e3)
            if len(got) != 1:
                raise RuntimeError(f"q{n}: no item {i}")
            board.post(f"q{n}", [item(i)])
    return lat


def scans(board: Board, sizes: list[int], reps: int) -> dict[int, float]:
    """Median ms of a Read by a range no key narrows: the fallback scan."""
    out = {}
    for n in sizes:
        pattern = Pattern(templates=(template("item", Range(n - 1, n - 1), ANY),))
        ms = []
        for _ in range(reps):
            t = time.perf_counter()
            if len(board.read(f"q{n}", pattern)) != 1:
                raise RuntimeError("scan found nothing")
            ms.append((time.perf_counter() - t) * 1e3)
        out[n] = statistics.median(ms)
    return out


def restart(path: Path, sync: bool, n: int) -> tuple[float, float]:
    """Seconds to open the board, and to its first Take's answer."""
    t = time.perf_counter()
    board = Board(path, sync=sync)
    opened = time.perf_counter() - t
    got = board.take(f"q{n}", Pattern(templates=(template("item", n // 2, ANY),)))
    first = time.perf_counter() - t
    board.close()
    if len(got) != 1:
        raise RuntimeError("restart lost an item")
    return opened, first


def routing(counts: list[int], messages: int, rng: random.Random) -> dict[int, dict[str, float]]:
    """µs per message routed through a PatternIndex and through a loop."""
    out = {}
    for k in counts:
        pats = []
        for j in range(k):
            if j % 2:
                pats.append(Pattern(AddressPattern.topic(f"orders.{j}.*")))
            else:
                pats.append(Pattern(AddressPattern.eq(f"orders.{j}")))
        index: PatternIndex[int] = PatternIndex()
        for j, p in enumerate(pats):
            index.add(j, p)
        msgs = []
        for _ in range(messages):
            j = rng.randrange(k)
            address = f"orders.{j}.created" if rng.random() < 0.5 else f"orders.{j}"
            msgs.append(Message(address=address))
        row: dict[str, list[float]] = {"index": [], "loop": []}
        for _ in range(5):  # in turns
            t = time.perf_counter_ns()
            hits = sum(len(index.match(m)) for m in msgs)
            row["index"].append((time.perf_counter_ns() - t) / 1e3 / messages)
            t = time.perf_counter_ns()
            loop_hits = sum(1 for m in msgs for p in pats if p.matches(m))
            row["loop"].append((time.perf_counter_ns() - t) / 1e3 / messages)
            if hits != loop_hits:
                raise RuntimeError(f"index found {hits}, the loop {loop_hits}")
        out[k] = {name: statistics.median(v) for name, v in row.items()}
    return out


def posting(
    tmp: Path, counts: list[int], messages: int, rounds: int, rng: random.Random
) -> dict[int, float]:
    """Posts/s into a queue with N selectors (half eq addresses, half topics,
    each MOVE to one of ten queues), through the engine; each message
    matches one selector. The boards are measured in turns."""
    boards = {}
    for k in counts:
        b = Board(tmp / f"routing{k}", sync=False)
        b.create_queue(QueueSpec("in"))
        for d in range(10):
            b.create_queue(QueueSpec(f"d{d}"))
        futs = []
        for j in range(k):
            addr = (
                AddressPattern.topic(f"orders.{j}.*") if j % 2 else AddressPattern.eq(f"orders.{j}")
            )
            spec = SelectorSpec("in", Pattern(addr), destination=f"d{j % 10}")
            futs.append(b.create_selector_async(spec))
        for f in futs:
            f.result()
        boards[k] = b
    rates: dict[int, list[float]] = {k: [] for k in counts}
    try:
        for _ in range(rounds):
            for k, b in boards.items():
                batches = []
                for _ in range(messages // 1000):
                    batch = []
                    for _ in range(1000):
                        j = rng.randrange(k)
                        address = f"orders.{j}.created" if j % 2 else f"orders.{j}"
                        batch.append(Message(tuple=(j,), address=address))
                    batches.append(batch)
                t = time.perf_counter()
                for f in [b.post_async("in", batch) for batch in batches]:
                    f.result()
                rates[k].append(messages / (time.perf_counter() - t))
                if b.get_queue("in").unprocessed:
                    raise RuntimeError("a message was not routed")
    finally:
        for b in boards.values():
            b.close()
    return {k: statistics.median(v) for k, v in rates.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000,1000000")
    p.add_argument("--takes", type=int, default=2000, help="takes per queue size")
    p.add_argument("--scan-up-to", type=int, default=100_000, help="largest size for the scan row")
    p.add_argument("--patterns", default="10,1000,10000")
    p.add_argument("--sync", choices=["fsync", "weaker-no-fsync"], default="weaker-no-fsync")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--route-messages", type=int, default=20_000, help="per posting round")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    counts = [int(s) for s in args.patterns.split(",")]
    sync = args.sync == "fsync"
    rng = random.Random(args.seed)
    res: dict[str, object] = {}

    with tempfile.TemporaryDirectory(prefix="msgboard-scaling-") as tmp:
        path = Path(tmp) / "board"
        with Board(path, sync=False) as board:
            rates = {}
            for n in sizes:
                rates[n] = build(board, f"q{n}", n)
                print(f"built q{n}: {rates[n]:,.0f} posts/s", file=sys.stderr)
        with Board(path, sync=sync) as board:
            board.take(f"q{sizes[0]}", Pattern(templates=(template("item", 0, ANY),)))
            board.post(f"q{sizes[0]}", [item(0)])  # warm up
            lat = takes(board, sizes, args.takes, rng)
            scan = scans(board, [n for n in sizes if n <= args.scan_up_to], 3)
        opened, first = restart(path, sync, sizes[-1])
        total = sum(sizes)
        posted = posting(Path(tmp), counts, args.route_messages, 3, rng)
    routed = routing(counts, 2000, rng)

    day = time.strftime("%Y-%m-%d")
    print(f"\nmsgboard scaling, {args.sync}, on {platform.node()} ({os.cpu_count()} cores), {day}")
    print(f"\nTake by template ('item', i, ANY), engine in-process, {args.takes:,} takes per size")
    print(f"{'waiting tuples':>16} {'p50 µs':>10} {'p99 µs':>10} {'fallback scan ms':>18}")
    p50 = {}
    for n in sizes:
        p50[n] = statistics.median(lat[n])
        s = f"{scan[n]:>18.1f}" if n in scan else f"{'-':>18}"
        print(f"{n:>16,} {p50[n]:>10.1f} {pct(lat[n], 0.99):>10.1f} {s}")
    ratio = p50[sizes[-1]] / p50[sizes[0]]
    print(f"p50 ratio {sizes[-1]:,} / {sizes[0]:,}: {ratio:.2f} (goal <= 2)")
    print(f"\nRestart of a board of {total:,} messages: open {opened:.3f} s,", end=" ")
    print(f"first take answered at {first:.3f} s")
    print("\nRouting one message through N patterns (half eq, half topic), index level, µs/msg")
    print(f"{'patterns':>16} {'PatternIndex':>14} {'loop':>12} {'loop/index':>12}")
    for k, row in routed.items():
        gain = row["loop"] / row["index"]
        print(f"{k:>16,} {row['index']:>14.2f} {row['loop']:>12.2f} {gain:>12.1f}")
    print("\nPost into a queue with N selectors (half eq, half topic; MOVE to 10 queues),")
    print("engine in-process, weaker-no-fsync, batches of 1,000, median of 3 turns")
    print(f"{'selectors':>16} {'posts/s':>14}")
    for k, rate in posted.items():
        print(f"{k:>16,} {rate:>14,.0f}")
    route_ratio = posted[counts[0]] / posted[counts[-1]]
    print(f"posts/s ratio {counts[0]:,} / {counts[-1]:,} selectors: {route_ratio:.2f} (goal <= 2)")
    print(f"\nbuild rate (batches of 1,000, not measured above): {rates}")

    res = {
        "args": vars(args),
        "take_p50_us": p50,
        "take_p99_us": {n: pct(lat[n], 0.99) for n in sizes},
        "take_ratio": ratio,
        "scan_ms": scan,
        "restart_open_s": opened,
        "restart_first_take_s": first,
        "restart_messages": total,
        "routing_us": routed,
        "post_through_selectors_per_s": posted,
        "post_through_selectors_ratio": route_ratio,
        "build_posts_per_s": rates,
    }
    os.makedirs(args.out, exist_ok=True)
    out = Path(args.out) / f"scaling-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(res, indent=2))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
