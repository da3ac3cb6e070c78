"""Decode (ptars) + write Parquet with pyarrow in one process: what an
export costs per row when its rows never enter the JVM.

    venv/bin/python pqwrite.py SNAP OUTDIR
"""
import os, shutil, sys, time
import pyarrow as pa, pyarrow.parquet as pq
from pyspark_msgboard import columns, snapshot
import ptars_adapter
sys.path.insert(0, "/work/main/bench")
from spark import parse

snap, out = sys.argv[1], sys.argv[2]
plan = snapshot.plan(snap)
n = sum(r.rows for p in plan for r in p)
columns.batch = ptars_adapter.batch

def export():
    shutil.rmtree(out, ignore_errors=True); os.makedirs(out)
    for i, ranges in enumerate(plan):
        w = None
        for b in snapshot.read(snap, ranges):
            if w is None:
                w = pq.ParquetWriter(os.path.join(out, f"part-{i}.parquet"), b.schema, compression="snappy")
            w.write_batch(b)
        if w: w.close()

for r in range(3):
    f = time.perf_counter(); parse(snap); f = time.perf_counter() - f
    t = time.perf_counter(); export(); t = time.perf_counter() - t
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"load {os.getloadavg()[0]:.1f}: floor {n/f:,.0f} rows/s; decode+write Parquet {n/t:,.0f} rows/s ({f/t:.2f}x floor), {size/2**20:.1f} MiB")
shutil.rmtree(out)
