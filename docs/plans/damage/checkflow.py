"""The proposed ``msgboard check``: verify the pages first, then let LMDB
read only what was verified; name damage by queue and place.

1. ``datafile.check`` (a truncated file) and ``pageverify`` (deep): the
   pages of every tree, by hand. Neither can crash the process.
2. Clean: today's logical check (``msgboard.lmdbstore.check``) runs as it
   is; LMDB cannot meet a page the verifier did not pass.
3. Damaged: LMDB is not used at all. The salvage walk
   (``DataFile.items``) reads what is readable; each damaged subtree is
   listed with the queue(s) its key range covers (the parent's separator
   keys are intact), and each queue's readable records are counted against
   its counters, so the gap is named: "queue 'jobs': 13 of 2,100
   unprocessed records unreadable (seqs 989 to 1001, page 7)".

    python checkflow.py DIR       # exit 0 clean, 1 damaged; never a signal
"""

from __future__ import annotations

import json
import struct
import sys
from dataclasses import dataclass, field

from msgboard.errors import MsgboardError
from msgboard.lmdbstore import check as logical
from msgboard.lmdbstore import datafile, record

import pageverify

_KEY = struct.Struct(">IQ")
_QID = struct.Struct(">I")
_STATE = struct.Struct(">QQQ")
#: Trees whose keys begin with a queue id (u32, big-endian).
_BY_QID = ("unprocessed", "history", "state", "times", "index")


@dataclass
class QueueGap:
    """One queue's records as the salvage walk found them."""

    name: str
    counters: tuple[int, int, int] | None = None
    readable: dict[str, int] = field(default_factory=lambda: {"unprocessed": 0, "history": 0})
    damaged: list[str] = field(default_factory=list)


def _seq_range(low: bytes | None, high: bytes | None, qid: int) -> str:
    """The seqs of queue ``qid`` a key range [low, high) may hold."""
    first = 1
    if low is not None and len(low) >= 4 and _QID.unpack_from(low)[0] == qid:
        first = _KEY.unpack(low.ljust(12, b"\0")[:12])[1]
    if high is not None and len(high) >= 4 and _QID.unpack_from(high)[0] == qid:
        last = _KEY.unpack(high.ljust(12, b"\0")[:12])[1] - 1
        return f"seqs {first} to {last}"
    return f"seqs {first} on"


def _qids(low: bytes | None, high: bytes | None, known: dict[int, str]) -> list[int]:
    """The queue ids whose keys fall in [low, high)."""
    lo = _QID.unpack_from(low)[0] if low is not None and len(low) >= 4 else 0
    hi = _QID.unpack_from(high)[0] if high is not None and len(high) >= 4 else 2**32 - 1
    if high is not None and len(high) >= 4 and high[4:].strip(b"\0") == b"":
        hi -= 1  # the range ends at the start of queue `hi`: not in it
    return [q for q in sorted(known) if lo <= q <= hi]


def damaged_report(path: str, report: pageverify.Report) -> list[str]:
    """Lines naming each damage by queue and place, and each queue's
    readable records against its counters; reads by hand only."""
    lines: list[str] = []
    with pageverify.DataFile(path) as f:
        f.verify()
        names: dict[int, str] = {}
        for key, value in f.items(b"queues"):
            try:
                names[int(json.loads(value)["id"])] = key.decode(errors="replace")
            except (ValueError, KeyError, TypeError):
                lines.append(f"queue {key!r}: its entry does not parse")
        gaps = {qid: QueueGap(name) for qid, name in names.items()}
        for key, value in f.items(b"state"):
            if len(key) == 4 and len(value) == _STATE.size and _QID.unpack(key)[0] in gaps:
                gaps[_QID.unpack(key)[0]].counters = _STATE.unpack(value)
        for section in ("unprocessed", "history"):
            prev: dict[int, int] = {}
            for key, value in f.items(section.encode()):
                qid, seq = _KEY.unpack(key) if len(key) == 12 else (-1, -1)
                gap = gaps.get(qid)
                if gap is None:
                    lines.append(f"{section}: a record under key {key.hex()}, of no queue")
                    continue
                try:
                    record.unseal(key, value)
                    gap.readable[section] += 1
                except record.Damaged as e:
                    # Named by its place, not by the seq its damaged key shows.
                    gap.damaged.append(f"{section}: the record after seq {prev.get(qid, 0)} ({e})")
                prev[qid] = seq
    for p in report.problems:
        tree = p.tree
        if tree in _BY_QID and names:
            for qid in _qids(p.low, p.high, names) or [-1]:
                name = names.get(qid, "?")
                where = _seq_range(p.low, p.high, qid) if tree != "index" else "index keys"
                lines.append(f"queue {name!r}: {tree} {where} unreadable (page {p.pgno}: {p.what})")
        else:
            lines.append(f"damaged: {p}")
    for gap in gaps.values():
        if gap.counters is None:
            continue
        _next, unprocessed, history = gap.counters
        for section, want in (("unprocessed", unprocessed), ("history", history)):
            have = gap.readable[section]
            if have != want:
                lines.append(
                    f"queue {gap.name!r}: counters say {want:,} {section}, "
                    f"{have:,} readable: {want - have:,} lost"
                )
        lines += [f"queue {gap.name!r}: {d}" for d in gap.damaged[:20]]
    return lines


def check(path: str) -> tuple[int, list[str]]:
    """Exit status and lines of the proposed check."""
    try:
        datafile.check(path)
        report = pageverify.verify(path)
    except (MsgboardError, pageverify.NotLmdb, OSError) as e:
        return 1, [str(e)]
    if report.ok:
        r = logical.check(path)
        return (0 if r.ok else 1), list(r.lines())
    return 1, [*damaged_report(path, report), f"{len(report.problems)} damaged page(s)"]


if __name__ == "__main__":
    rc, out = check(sys.argv[1])
    print("\n".join(out))
    raise SystemExit(rc)
