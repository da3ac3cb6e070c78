"""Cost per key of walking the waiting section (keys + the stored CRC)."""
import sys, time, struct
import numpy as np
from nightplan import opened, queues, waiting, ENTRY
snap = sys.argv[1]
env, dbs = opened(snap)

def best(fn, k=5):
    r = []
    for _ in range(k):
        t = time.perf_counter(); n = fn(); r.append(time.perf_counter() - t)
    return min(r), n

def keys_only(txn):
    n = 0
    for _ in txn.cursor(db=dbs["unprocessed"]).iternext(values=False):
        n += 1
    return n

def items(txn):
    n = 0
    for _ in txn.cursor(db=dbs["unprocessed"]).iternext():
        n += 1
    return n

def keys_crc(txn):
    return sum(len(waiting(txn, dbs["unprocessed"], q)) for q in queues(txn, dbs).values())

def keys_crc_join(txn):
    cur = txn.cursor(db=dbs["unprocessed"])
    parts = [k[4:12].tobytes() + v[1:5].tobytes() for k, v in cur.iternext()]
    return len(np.frombuffer(b"".join(parts), ENTRY))

for buffers in (False, True):
    with env.begin(buffers=buffers) as txn:
        for name, fn in (("keys only", keys_only), ("keys+values", items), ("keys+crc (nightplan.waiting)", keys_crc)) + ((("keys+crc, join", keys_crc_join),) if buffers else ()):
            t, n = best(lambda: fn(txn))
            print(f"buffers={buffers!s:5} {name:30s} {t/n*1e6:5.2f} us/key  ({n:,} keys)")

from operator import itemgetter
_crc = itemgetter(slice(1, 5))
KEY = np.dtype([("qid", ">u4"), ("seq", ">u8")])

def keys_crc_bulk(txn):
    """All in C loops: the items listed, keys joined, CRCs sliced by itemgetter."""
    cur = txn.cursor(db=dbs["unprocessed"])
    total = 0
    while True:
        chunk = list(__import__("itertools").islice(cur.iternext(), 65536))
        if not chunk:
            break
        ks, vs = zip(*chunk)
        keys = np.frombuffer(b"".join(ks), KEY)
        crcs = np.frombuffer(b"".join(map(_crc, vs)), ">u4")
        total += len(keys)
        if len(chunk) < 65536:
            break
    return total

with env.begin() as txn:
    t, n = best(lambda: keys_crc_bulk(txn))
    print(f"buffers=False keys+crc, C loops (chunks of 64k)  {t/n*1e6:5.2f} us/key  ({n:,} keys)")
