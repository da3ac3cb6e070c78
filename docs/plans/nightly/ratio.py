"""The decode against the scan + check + parse floor, today's bulk decoder
and ptars side by side, interleaved (floor, today, ptars; 3 rounds), in one
process over the whole snapshot (snapshot.plan + snapshot.read).

    venv/bin/python ratio.py SNAP
"""
import collections, os, sys, time
sys.path.insert(0, "/work/main/bench")
from spark import parse
from pyspark_msgboard import columns, snapshot
import ptars_adapter

snap = sys.argv[1]
plan = snapshot.plan(snap)
n = sum(r.rows for p in plan for r in p)
today = columns.batch

def decode(fn):
    columns.batch = fn
    try:
        for ranges in plan:
            collections.deque(snapshot.read(snap, ranges), maxlen=0)
    finally:
        columns.batch = today

def timed(fn):
    t = time.perf_counter(); fn(); return time.perf_counter() - t

decode(today); decode(ptars_adapter.batch)  # warm: imports, page cache
rows = []
for r in range(3):
    f = timed(lambda: parse(snap))
    a = timed(lambda: decode(today))
    b = timed(lambda: decode(ptars_adapter.batch))
    rows.append((f, a, b))
    print(f"round {r+1}: load {os.getloadavg()[0]:.1f}  floor {n/f:>9,.0f} rows/s  today {n/a:>8,.0f} rows/s ({f/a:.2f}x floor)  ptars {n/b:>8,.0f} rows/s ({f/b:.2f}x floor)")
f, a, b = (min(x) for x in zip(*rows))
print(f"best of 3: floor {f/n*1e6:.2f} us/rec; today {a/n*1e6:.2f} us/rec ({f/a:.2f}x); ptars {b/n*1e6:.2f} us/rec ({f/b:.2f}x)")
