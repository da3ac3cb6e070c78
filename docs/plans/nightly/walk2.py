import sys, time
import numpy as np
from operator import itemgetter
from nightplan import opened
env, dbs = opened(sys.argv[1])
_crc = itemgetter(slice(1, 5))
def t(label, fn, k=5):
    r = []
    for _ in range(k):
        a = time.perf_counter(); out = fn(); r.append(time.perf_counter() - a)
    print(f"{label:40s} {min(r)/99900*1e6:5.2f} us/key"); return out
with env.begin() as txn:
    kv = t("list(iternext())", lambda: list(txn.cursor(db=dbs["unprocessed"]).iternext()))
    ks = t("keys list (values=False)", lambda: list(txn.cursor(db=dbs["unprocessed"]).iternext(values=False)))
    vs = t("values list (keys=False)", lambda: list(txn.cursor(db=dbs["unprocessed"]).iternext(keys=False)))
    t("zip(*kv)", lambda: list(zip(*kv)))
    t("b''.join(keys) + frombuffer", lambda: np.frombuffer(b"".join(ks), [("q", ">u4"), ("s", ">u8")]))
    t("b''.join(map(crc slice, values))", lambda: np.frombuffer(b"".join(map(_crc, vs)), ">u4"))
    t("keys list + values list + both joins", lambda: (np.frombuffer(b"".join(txn.cursor(db=dbs["unprocessed"]).iternext(values=False)), [("q", ">u4"), ("s", ">u8")]), np.frombuffer(b"".join(map(_crc, txn.cursor(db=dbs["unprocessed"]).iternext(keys=False))), ">u4")))
with env.begin(buffers=True) as txn:
    a = t("buffers: join(map(crc, values)) keys=False", lambda: np.frombuffer(b"".join(map(_crc, txn.cursor(db=dbs["unprocessed"]).iternext(keys=False))), ">u4"))
    def both():
        c = txn.cursor(db=dbs["unprocessed"])
        keys = np.frombuffer(b"".join(map(bytes, c.iternext(values=False))), [("q", ">u4"), ("s", ">u8")])
        crcs = np.frombuffer(b"".join(map(_crc, txn.cursor(db=dbs["unprocessed"]).iternext(keys=False))), ">u4")
        return keys, crcs
    k2, c2 = t("buffers: two walks, keys and crcs, C loops", both)
with env.begin() as txn:
    ref = [(k[4:], v[1:5]) for k, v in txn.cursor(db=dbs["unprocessed"])]
print("same as a copying walk:", [(k.tobytes()[4:], c.tobytes()) for k, c in zip(k2, c2.view("u1").reshape(-1, 4))] == ref)
