"""The no-op decision as the CLI would make it before Spark: the books and
the snapshot's manifest compared (both JSON), through today's modules
(importing pyspark_msgboard pulls pyspark and pyarrow, not a JVM).

    python noop.py SNAP DATASET_BOOKS_DIR
"""
import json, os, sys, time
t0 = time.perf_counter()
from msgboard.lmdbstore import snapshot as snapshots
if "--package" in sys.argv:
    from pyspark_msgboard import dataset  # today's package import (pyspark, pyarrow)
t1 = time.perf_counter()
man = snapshots.load(sys.argv[1])
with open(os.path.join(sys.argv[2], "books.json")) as f:
    books = json.load(f)
verdict = ("unchanged" if man.taken_at == books["taken_at_us"]
           else "older: refused" if man.taken_at < books["taken_at_us"] else "work")
t2 = time.perf_counter()
print(f"{verdict}: imports {t1-t0:.2f} s, decision {1000*(t2-t1):.1f} ms")
