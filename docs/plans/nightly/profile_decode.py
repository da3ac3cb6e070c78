"""cProfile of the data source's bulk decode (snapshot.read over the whole
plan, one process), plus the floors bench/spark.py measures.

    python profile_decode.py SNAP [--profile]
"""
import collections, cProfile, pstats, sys, time
sys.path.insert(0, "/work/main/bench")
from spark import parse  # the scan + check + parse floor
from pyspark_msgboard import snapshot

snap = sys.argv[1]
plan = snapshot.plan(snap)
n = sum(r.rows for p in plan for r in p)

def decode():
    for ranges in plan:
        collections.deque(snapshot.read(snap, ranges), maxlen=0)

def best(fn, k=3):
    out = []
    for _ in range(k):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return min(out)

if "--profile" in sys.argv:
    pr = cProfile.Profile(); pr.enable(); decode(); pr.disable()
    st = pstats.Stats(pr); st.sort_stats("tottime").print_stats(25)
    st.sort_stats("cumulative").print_stats(30)
else:
    raw = best(lambda: snapshot.raw_scan(snap))
    par = best(lambda: parse(snap))
    dec = best(decode)
    print(f"{n:,} records")
    print(f"raw cursor scan    {raw/n*1e6:6.2f} us/rec  {n/raw:>10,.0f} rows/s")
    print(f"scan+check+parse   {par/n*1e6:6.2f} us/rec  {n/par:>10,.0f} rows/s")
    print(f"decode to Arrow    {dec/n*1e6:6.2f} us/rec  {n/dec:>10,.0f} rows/s  ratio {par/dec:.3f}")
