"""Decoders side by side on the same records of a snapshot (one process):
today's columns.batch, ptars (Rust, protobuf -> Arrow), and the prototypes.

    python decoders.py SNAP [names...]
"""
from __future__ import annotations
import sys, time
import numpy as np, pyarrow as pa
from msgboard.lmdbstore import record
from pyspark_msgboard import columns, snapshot

def load(snap):
    with snapshot.opened(snap) as (env, dbs), env.begin() as txn:
        items = [(k, v) for s in snapshot.SECTIONS for k, v in txn.cursor(db=dbs[s])]
    return items

def chunked(items, n=8192):
    return [items[i:i+n] for i in range(0, len(items), n)]

def best(fn, k=3):
    out = []
    for _ in range(k):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return min(out)

def main():
    snap = sys.argv[1]
    want = sys.argv[2:]
    items = load(snap)
    n = len(items)
    chunks = chunked(items)
    keys = [[k for k, _ in c] for c in chunks]
    payloads = [[record.unseal(k, v) for k, v in c] for c in chunks]
    tests = {}
    tests["unseal (CRC32C, python loop)"] = lambda: [[record.unseal(k, v) for k, v in c] for c in chunks]
    tests["columns.batch (today)"] = lambda: [columns.batch(k, p, "q", "history") for k, p in zip(keys, payloads)]
    try:
        import ptars
        from msgboard.v1 import board_pb2 as pb
        cfg = ptars.PtarsConfig(timestamp_unit="us")
        pool = ptars.HandlerPool([pb.DESCRIPTOR], config=cfg) if "config" in ptars.HandlerPool.__init__.__code__.co_varnames else ptars.HandlerPool([pb.DESCRIPTOR])
        h = pool.get_for_message(pb.Message.DESCRIPTOR)
        rb = h.list_to_record_batch(payloads[0][:3])
        print(rb.schema, file=sys.stderr)
        import ptars_adapter
        tests["ptars + adapter to columns.ARROW"] = lambda: [ptars_adapter.batch(k, p, "q", "history") for k, p in zip(keys, payloads)]
        tests["ptars list_to_record_batch"] = lambda: [h.list_to_record_batch(p) for p in payloads]
        arrs = [pa.array(p, pa.binary()) for p in payloads]
        if hasattr(h, "array_to_record_batch"):
            tests["ptars array_to_record_batch"] = lambda: [h.array_to_record_batch(a) for a in arrs]
    except ImportError:
        pass
    try:
        import cdecode
        tests["C prototype (cdecode.batch)"] = lambda: [cdecode.batch(k, p, "q", "history") for k, p in zip(keys, payloads)]
        tests["C prototype incl. unseal (cdecode.records)"] = lambda: [cdecode.records(c, "q", "history") for c in chunks]
    except ImportError as e:
        print("no cdecode:", e, file=sys.stderr)
    for name, fn in tests.items():
        if want and not any(w in name for w in want):
            continue
        t = best(fn)
        print(f"{name:44s} {t/n*1e6:7.2f} us/record  ({n:,} records)")


def check(snap):
    """ptars_adapter.batch equals columns.batch on every batch."""
    import ptars_adapter
    items = load(snap)
    bad = 0
    for c in chunked(items):
        k = [a for a, _ in c]; p = [record.unseal(a, b) for a, b in c]
        want = columns.batch(k, p, "q", "history")
        got = ptars_adapter.batch(k, p, "q", "history")
        if not want.equals(got):
            bad += 1
            for f in want.schema.names:
                if not want.column(f).equals(got.column(f)):
                    print("differs:", f, want.column(f).type, got.column(f).type)
                    print(want.column(f)[:2], got.column(f)[:2]); break
    print("batches differing:", bad)

if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        main()
