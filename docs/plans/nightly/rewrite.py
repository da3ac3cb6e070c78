"""Cost of rewriting an unprocessed block file without the rows that left
(pyarrow: read, filter by seq, concat new rows, sort, write): per row kept.

    venv/bin/python rewrite.py SNAP
"""
import os, sys, time, tempfile
import numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq
from pyspark_msgboard import columns, snapshot
import ptars_adapter
columns.batch = ptars_adapter.batch
snap = sys.argv[1]
tables = [pa.Table.from_batches(list(snapshot.read(snap, ranges))) for ranges in snapshot.plan(snap)]
t = pa.concat_tables(tables).drop_columns(["queue", "section"])
n = t.num_rows
with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(snap))) as d:
    old = os.path.join(d, "old.parquet"); new = os.path.join(d, "new.parquet")
    pq.write_table(t, old)
    seqs = t.column("seq").to_numpy()
    left = pa.array(np.random.default_rng(1).choice(seqs, n // 10, replace=False))
    fresh = t.slice(0, n // 10)
    best = 1e9
    for _ in range(3):
        a = time.perf_counter()
        kept = pq.read_table(old).filter(pc.invert(pc.is_in(pc.field("seq"), left)) if False else pc.invert(pc.is_in(pq.read_table(old, columns=["seq"]).column("seq"), left)))
        out = pa.concat_tables([kept, fresh]).sort_by("seq")
        pq.write_table(out, new)
        best = min(best, time.perf_counter() - a)
    print(f"load {os.getloadavg()[0]:.1f}: rewrite of {n:,} rows (10% out, 10% in): {best:.2f} s, {n/best:,.0f} rows/s")
