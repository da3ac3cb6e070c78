"""Night 2's day on a copy of the board: per queue, 10% of the waiting
taken in order, as many posted, 25 taken out of order (by pattern), 50
leased and nacked (their waiting records change: delivery_count + 1); then
snapshot SNAP2.

    python day2.py DATA
"""
import shutil, sys, time
from pathlib import Path
from msgboard import Message
from msgboard.associative import Pattern, template
from msgboard.engine import Board
sys.path.insert(0, "/work/main/bench")
from spark import QUEUES

root = Path(sys.argv[1]).resolve()
if not (root / "board2").exists():
    shutil.copytree(root / "board", root / "board2")
with Board(root / "board2", sync=False) as b:
    for q in QUEUES:
        waiting = b.get_queue(q).unprocessed if hasattr(b.get_queue(q), "unprocessed") else 25000
        n = waiting // 10
        taken = 0
        while taken < n:
            taken += len(b.take(q, max=min(10_000, n - taken)))
        start = 10**6
        b.post(q, [Message(tuple=(q, i, i * 0.5, f"item-{i % 1000}"), address=f"{q}.eu.1",
                           headers={"tenant": "t1"}, content_type="application/json",
                           body=b'{"n": %d}' % i) for i in range(start, start + n)])
        b.take(q, Pattern(templates=(template(q, int, float, "item-7"),)), max=25)
        leased = b.take_leased(q, Pattern(templates=(template(q, int, float, "item-9"),)), max=50, lease=60)
        b.ack_leases(q, [d.id for d in leased], nack=True)
    info = b.snapshot(root / "snap2")
    print(f"snap2: {info.messages:,} messages", {k: (v.unprocessed, v.history, v.next_seq) for k, v in info.queues.items()})
