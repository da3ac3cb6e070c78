"""Prototype of the night's survey: what a night must decode, decided in
Python before any JVM, from the books and the snapshot's keys alone.

Per queue generation (name, qid) the books hold the mark (next_seq at the
last night) and last night's waiting index: (seq, crc) of every waiting
record, the CRC32C being the 4 bytes the record framing already stores
(record.py), so a waiting record that changed (a redelivery raised its
delivery_count) is told from one that did not without decoding either.

    python nightplan.py index SNAP BOOKS      # write SNAP's waiting index as the books' (night 1)
    python nightplan.py survey SNAP BOOKS     # night 2: what to decode, and the time it took
"""
from __future__ import annotations

import json, os, struct, sys, time
import lmdb
import numpy as np

from msgboard.lmdbstore import snapshot as snapshots
from msgboard.lmdbstore import datafile

#: One waiting record in the index: its seq and the CRC32C its framing stores.
ENTRY = np.dtype([("seq", ">u8"), ("crc", ">u4")])
#: Seqs per block: the unit the waiting index and the unprocessed files are kept in.
BLOCK_BITS = 16
_QID = struct.Struct(">I")


def opened(path):
    datafile.check(path)
    env = lmdb.open(path, readonly=True, lock=False, max_dbs=32, subdir=True)
    dbs = {n: env.open_db(n.encode(), create=False) for n in ("meta", "queues", "unprocessed", "history")}
    return env, dbs


def waiting(txn, db, qid: int) -> np.ndarray:
    """(seq, crc) of every waiting record of the queue, in seq order: a
    cursor walk, no value decoded (only bytes 1-5 of each read)."""
    prefix = _QID.pack(qid)
    cur = txn.cursor(db=db)
    out = bytearray()
    if cur.set_range(prefix):
        for k, v in cur.iternext():
            if k[:4] != prefix:
                break
            out += k[4:12]
            out += v[1:5]
    return np.frombuffer(bytes(out), ENTRY)


def queues(txn, dbs) -> dict[str, int]:
    return {bytes(k).decode(): json.loads(bytes(v))["id"] for k, v in txn.cursor(db=dbs["queues"])}


def digest(entries: np.ndarray) -> dict[int, tuple[int, int]]:
    """Per block: (count, an order-free 64-bit digest of its (seq, crc))."""
    seq = entries["seq"].astype(np.uint64)
    h = seq * np.uint64(0x9E3779B97F4A7C15) ^ entries["crc"].astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
    blocks = (seq >> np.uint64(BLOCK_BITS)).astype(np.int64)
    out = {}
    if len(seq):
        edges = np.flatnonzero(np.diff(blocks)) + 1
        for lo, hi in zip(np.r_[0, edges], np.r_[edges, len(seq)]):
            out[int(blocks[lo])] = (int(hi - lo), int(np.add.reduce(h[lo:hi], dtype=np.uint64)))
    return out


def write_index(snap: str, books: str) -> None:
    man = snapshots.load(snap)
    env, dbs = opened(snap)
    os.makedirs(os.path.join(books, "waiting"), exist_ok=True)
    gens = {}
    with env.begin(buffers=True) as txn:
        for name, qid in queues(txn, dbs).items():
            w = waiting(txn, dbs["unprocessed"], qid)
            blocks = digest(w)
            d = os.path.join(books, "waiting", str(qid))
            os.makedirs(d, exist_ok=True)
            for b in blocks:
                sel = w[(w["seq"] >> BLOCK_BITS) == b]
                np.save(os.path.join(d, f"{b}.npy"), sel)
            gens[f"{name}#{qid}"] = {"name": name, "id": qid, "next_seq": man.queues[name].next_seq,
                                     "blocks": {str(b): list(v) for b, v in blocks.items()}}
    env.close()
    with open(os.path.join(books, "books.json"), "w") as f:
        json.dump({"taken_at_us": man.taken_at, "generations": gens}, f)


def survey(snap: str, books: str) -> dict:
    """What tonight must decode and rewrite, per queue generation."""
    t0 = time.perf_counter()
    man = snapshots.load(snap)
    with open(os.path.join(books, "books.json")) as f:
        b = json.load(f)
    if man.taken_at == b["taken_at_us"]:
        return {"verdict": "unchanged"}
    if man.taken_at < b["taken_at_us"]:
        return {"verdict": "older: refused"}
    env, dbs = opened(snap)
    plan = {"verdict": "work", "queues": {}}
    walked = 0
    with env.begin(buffers=True) as txn:
        hist = txn.cursor(db=dbs["history"])
        for name, qid in queues(txn, dbs).items():
            prev = b["generations"].get(f"{name}#{qid}")
            mark = prev["next_seq"] if prev else 1
            now = waiting(txn, dbs["unprocessed"], qid)
            walked += len(now)
            blocks_now = digest(now)
            blocks_old = {int(k): tuple(v) for k, v in (prev or {}).get("blocks", {}).items()}
            touched = sorted(k for k in blocks_now.keys() | blocks_old.keys()
                             if blocks_now.get(k) != blocks_old.get(k))
            left, changed, fresh = [], [], []
            for blk in touched:
                path = os.path.join(books, "waiting", str(qid), f"{blk}.npy")
                old = np.load(path) if blk in blocks_old else np.zeros(0, ENTRY)
                new = now[(now["seq"] >> BLOCK_BITS) == blk]
                gone = ~np.isin(old["seq"], new["seq"])
                left.append(old["seq"][gone])
                common_new = np.isin(new["seq"], old["seq"])
                idx = np.searchsorted(old["seq"], new["seq"][common_new])
                diff = old["crc"][idx] != new["crc"][common_new]
                changed.append(new["seq"][common_new][diff])
                fresh.append(new["seq"][~common_new])
            cat = lambda xs: np.concatenate(xs).astype(np.uint64) if xs else np.zeros(0, np.uint64)
            left, changed, fresh = cat(left), cat(changed), cat(fresh)
            # History to decode: every seq from the mark on, and the left ones
            # that are in history (a presence check by key: nothing decoded).
            in_hist = sum(1 for s in left.tolist() if hist.set_key(_QID.pack(qid) + struct.pack(">Q", s)))
            cnt = man.queues[name]
            tail = sum(1 for _ in _hist_from(hist, qid, mark))
            plan["queues"][name] = {
                "qid": qid, "mark": mark, "blocks touched": len(touched),
                "waiting: left": int(len(left)), "left into history": in_hist,
                "waiting: changed (crc)": int(len(changed)), "waiting: new": int(len(fresh)),
                "history from mark": tail,
                "rows to decode": in_hist + tail + int(len(changed)) + int(len(fresh)),
            }
    env.close()
    plan["waiting keys walked"] = walked
    plan["seconds"] = round(time.perf_counter() - t0, 3)
    return plan


def _hist_from(cur, qid, mark):
    prefix = _QID.pack(qid)
    if cur.set_range(prefix + struct.pack(">Q", mark)):
        for k in cur.iternext(values=False):
            if k[:4] != prefix:
                return
            yield k


if __name__ == "__main__":
    cmd, snap, books = sys.argv[1:4]
    if cmd == "index":
        t = time.perf_counter(); write_index(snap, books)
        print(f"index written in {time.perf_counter() - t:.3f} s")
    else:
        print(json.dumps(survey(snap, books), indent=1))
