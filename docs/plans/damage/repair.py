"""``msgboard check --repair``, prototyped: copy what is readable of a
damaged board into a fresh environment, rebuild what can be derived, and
set the damage aside in the board's own ``$damaged`` queue.

Nothing of the damaged file is read through LMDB: ``pageverify``'s salvage
walk (``DataFile.items``) reads each tree by hand and skips damaged
subtrees. Into the new environment (written through LMDB, which is safe: it
is LMDB's own fresh file):

- ``meta``, ``queues``, ``selectors``: every entry that parses;
- ``unprocessed``, ``history``: every record under its own key, byte for
  byte, if its key is a known queue's, below that queue's next seq, and its
  checksum holds; any other record goes to ``$damaged`` with its raw bytes
  (headers: the section, the key in hex, the queue it seemed to belong to,
  the seq after which it was found, why);
- ``state``: counted from the records copied (next seq: the old counter if
  readable, never below the highest seq copied + 1);
- ``index`` and ``times``: rebuilt from the records copied;
- every damaged subtree becomes one ``$damaged`` message naming the queue
  and seqs it held (no bytes: the page is gone).

The prototype writes the new board to another directory; the real command
would swap it in (``data.mdb`` kept as ``data.mdb.damaged-<time>``) and
reset the commit sidecar.

    python repair.py DAMAGED_DIR NEW_DIR
"""

from __future__ import annotations

import json
import struct
import sys
from dataclasses import dataclass, field

import lmdb
from msgboard import Message, QueueSpec
from msgboard.associative.keys import message_keys
from msgboard.codec import decode_record
from msgboard.lmdbstore import DurableStore, record
from msgboard.message import Section, now_us

from msgboard.lmdbstore import verify as pageverify

_KEY = struct.Struct(">IQ")
_QID = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_STATE = struct.Struct(">QQQ")
_BARE = message_keys("", ())
DAMAGED = "$damaged"


@dataclass
class Summary:
    """What the repair copied, set aside and lost."""

    copied: dict[str, int] = field(default_factory=dict)
    set_aside: int = 0
    lost_ranges: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"queue {n!r}: {c:,} records copied" for n, c in sorted(self.copied.items())]
        out.append(f"{self.set_aside} damaged record(s) moved to {DAMAGED!r}")
        out += [f"lost: {r}" for r in self.lost_ranges]
        return out


def repair(src: str, dst: str) -> Summary:
    """Copies the board at ``src`` into a new board at ``dst``."""
    s = Summary()
    aside: list[Message] = []
    with pageverify.DataFile(src) as f:
        report = f.verify()
        env = lmdb.open(dst, map_size=1 << 34, max_dbs=16, subdir=True)
        dbs = {
            n: env.open_db(n.encode(), dupsort=n == "index")
            for n in ("meta", "queues", "state", "unprocessed", "history", "times", "selectors")
        }
        dbs["index"] = env.open_db(b"index", dupsort=True)
        names: dict[int, str] = {}
        old_next: dict[int, int] = {}
        with env.begin(write=True) as txn:
            meta = dict(f.items(b"meta"))
            txn.put(b"schema", b"3", db=dbs["meta"])
            for key, value in f.items(b"queues"):
                try:
                    qid = int(json.loads(value)["id"])
                    QueueSpec.from_json(json.loads(value)["spec"])
                except (ValueError, KeyError, TypeError) as e:
                    aside.append(_aside("queues", key, value, "?", 0, f"does not parse: {e}"))
                    continue
                names[qid] = key.decode()
                txn.put(key, value, db=dbs["queues"])
            for key, value in f.items(b"state"):
                if len(key) == 4 and len(value) == _STATE.size:
                    old_next[_QID.unpack(key)[0]] = _STATE.unpack(value)[0]
            for key, value in f.items(b"selectors"):
                txn.put(key, value, db=dbs["selectors"])  # the board checks them at open
            counts = {qid: [0, 0, 0] for qid in names}  # highest seq, unprocessed, history
            stamps: dict[int, list[tuple[int, int]]] = {qid: [] for qid in names}
            for i, section in enumerate((Section.UNPROCESSED, Section.HISTORY), 1):
                prev: dict[int, int] = {}
                for key, value in f.items(section.value.encode()):
                    qid, seq = _KEY.unpack(key) if len(key) == 12 else (-1, 0)
                    name = names.get(qid, "?")
                    why = ""
                    if qid not in names:
                        why = "key of no queue"
                    elif qid in old_next and seq >= old_next[qid]:
                        why = f"seq {seq} not below next seq {old_next[qid]}"
                    else:
                        try:
                            m = decode_record(record.unseal(key, value), name, seq, section)
                        except Exception as e:  # Damaged, or a payload that does not parse
                            why = str(e) or type(e).__name__
                    if why:
                        aside.append(_aside(section.value, key, value, name, prev.get(qid, 0), why))
                        continue
                    prev[qid] = seq
                    txn.put(key, value, db=dbs[section.value])
                    c = counts[qid]
                    c[0], c[i] = max(c[0], seq), c[i] + 1
                    stamps[qid].append((seq, m.posted_at))
                    if section is Section.UNPROCESSED:
                        prefix, v = key[:4], key[4:]
                        for ik in (
                            message_keys(m.address, m.tuple) if m.address or m.tuple else _BARE
                        ):
                            txn.put(prefix + ik, v, db=dbs["index"])
            for qid, (top, unprocessed, history) in counts.items():
                next_seq = max(old_next.get(qid, 1), top + 1)
                txn.put(
                    _QID.pack(qid), _STATE.pack(next_seq, unprocessed, history), db=dbs["state"]
                )
                last = -1
                for seq, posted in sorted(stamps[qid]):
                    if posted // 1_000_000 != last:
                        last = posted // 1_000_000
                        txn.put(_KEY.pack(qid, last), _U64.pack(seq), db=dbs["times"])
                s.copied[names[qid]] = unprocessed + history
            top_qid = max(names, default=0)
            next_qid = (
                _U64.unpack(meta[b"next_qid"])[0] if len(meta.get(b"next_qid", b"")) == 8 else 0
            )
            txn.put(b"next_qid", _U64.pack(max(next_qid, top_qid + 1)), db=dbs["meta"])
            if len(meta.get(b"next_sid", b"")) == 8:
                txn.put(b"next_sid", meta[b"next_sid"], db=dbs["meta"])
        env.close()
        for p in report.problems:
            s.lost_ranges.append(str(p))
            if p.tree in ("index", "times", "state", "free", "meta"):
                continue  # rebuilt or not needed: nothing of the users' is lost
            aside.append(
                Message(headers={"lost": str(p), "tree": p.tree, "page": str(p.pgno)}, body=b"")
            )
    store = DurableStore(dst)
    try:
        board_txn = store.begin()
        now = now_us()
        board_txn.create_queue(QueueSpec(DAMAGED), now)
        for m in aside:
            board_txn.append(DAMAGED, m, now)
        board_txn.commit()
    finally:
        store.close()
    s.set_aside = len(aside)
    return s


def _aside(db: str, key: bytes, value: bytes, queue: str, after: int, why: str) -> Message:
    """A damaged entry as a ``$damaged`` message: its raw bytes, and where
    it was found (by place: the seq after which, not the one its key shows)."""
    headers = {"db": db, "key": key.hex(), "queue": queue, "after_seq": str(after), "why": why}
    return Message(headers=headers, body=bytes(value))


if __name__ == "__main__":
    print("\n".join(repair(sys.argv[1], sys.argv[2]).lines()))
