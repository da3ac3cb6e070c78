"""Builds a board of N messages (the shape of bench/spark.py: 4 queues,
half of each taken) with the engine API, and snapshots it.

    python build.py DIR N
"""
import sys, time
sys.path.insert(0, "/work/main/bench")
from pathlib import Path
from spark import build  # bench/spark.py's builder
from msgboard.engine import Board

root = Path(sys.argv[1]).resolve(); n = int(sys.argv[2])
t = time.perf_counter()
if not (root / "board").exists(): build(root / "board", n)
print(f"build {time.perf_counter()-t:.1f}s", file=sys.stderr)
with Board(root / "board", sync=False) as b:
    t = time.perf_counter()
    info = b.snapshot(root / "snap1")
    print(f"snapshot {time.perf_counter()-t:.2f}s {info.messages} msgs {info.bytes/2**20:.1f} MiB", file=sys.stderr)
