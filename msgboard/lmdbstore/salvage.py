"""Damaged pages named by queue and place, read by hand: what ``msgboard
check`` says, and the server's start-up refusal, for a data file the page
verifier (``verify.py``) did not pass. LMDB never reads such a file.

The salvage walk (``DataFile.items``) reads ``queues``, ``state`` and the
records that are readable; each damaged subtree is named by the queues and
seqs its key range covers (the parent's separator keys are intact), each
queue's readable records are counted against its counters (the gap), and a
record whose checksum fails is named by its place, "the record after seq
873", never by the seq its damaged key shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from msgboard.lmdbstore import record
from msgboard.lmdbstore.layout import KEY, QID, STATE
from msgboard.lmdbstore.pages import Problem, Report
from msgboard.lmdbstore.verify import DataFile

#: Trees whose keys begin with a queue id.
BY_QID = ("unprocessed", "history", "scheduled", "state", "times", "index", "keys")
SECTIONS = ("unprocessed", "history")
#: Damaged records listed per queue; the rest are counted.
LISTED = 20


@dataclass
class Gap:
    """One queue as the salvage walk found it: its counters (next seq,
    unprocessed, history), its readable records per section, its damage."""

    name: str
    counters: tuple[int, int, int] | None = None
    readable: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SECTIONS, 0))
    damaged: list[str] = field(default_factory=list)

    def lost(self) -> list[tuple[str, int, int]]:
        """(section, counted, readable) where the walk found fewer records
        than the counters say."""
        if self.counters is None:
            return []
        want = dict(zip(SECTIONS, self.counters[1:], strict=True))
        return [(s, want[s], self.readable[s]) for s in SECTIONS if self.readable[s] < want[s]]


def seq_range(p: Problem, qid: int) -> str:
    """The seqs of queue ``qid`` the damaged range of ``p`` may hold."""
    first = 1
    if p.low is not None and len(p.low) >= 4 and QID.unpack_from(p.low)[0] == qid:
        first = KEY.unpack(p.low.ljust(KEY.size, b"\0")[: KEY.size])[1]
    if p.high is not None and len(p.high) >= 4 and QID.unpack_from(p.high)[0] == qid:
        last = KEY.unpack(p.high.ljust(KEY.size, b"\0")[: KEY.size])[1] - 1
        return f"seqs {first} to {last}"
    return f"seqs {first} on"


def qids(p: Problem, known: dict[int, str]) -> list[int]:
    """The known queue ids whose keys fall in the damaged range of ``p``."""
    lo = QID.unpack_from(p.low)[0] if p.low is not None and len(p.low) >= 4 else 0
    hi = QID.unpack_from(p.high)[0] if p.high is not None and len(p.high) >= 4 else 2**32 - 1
    if p.high is not None and len(p.high) >= 4 and not p.high[4:].strip(b"\0"):
        hi -= 1  # the range ends where queue `hi` starts: not in it
    return [q for q in sorted(known) if lo <= q <= hi]


@dataclass
class Salvage:
    """What the salvage walk of a damaged file found."""

    report: Report
    schema: str = "?"
    names: dict[int, str] = field(default_factory=dict)
    gaps: dict[int, Gap] = field(default_factory=dict)
    #: Lines of damage outside any known queue.
    other: list[str] = field(default_factory=list)
    #: Durable selectors the walk reads.
    selectors: int = 0

    def place(self, p: Problem) -> str:
        """One damaged page, named by queue and seqs where its tree has them."""
        if p.tree in BY_QID and self.names:
            ids = qids(p, self.names)
            if ids:
                parts = [f"queue {self.names[q]!r} {self.held(p, q)}" for q in ids[:3]]
                more = f" and {len(ids) - 3} more queue(s)" if len(ids) > 3 else ""
                return f"{', '.join(parts)}{more} (page {p.pgno}: {p.what})"
        return str(p)

    def held(self, p: Problem, qid: int) -> str:
        """What of queue ``qid`` the damaged range of ``p`` held."""
        if p.tree in SECTIONS:
            return f"{p.tree} {seq_range(p, qid)}"
        words = {"index": "index keys", "state": "counters", "keys": "idempotency keys"}
        if p.tree == "scheduled":
            return f"scheduled {seq_range(p, qid)}"
        return words.get(p.tree, p.tree)

    def lines(self) -> list[str]:
        """The findings, one a line: damaged pages by place, each queue's
        gap, damaged records by place."""
        out = [f"damaged: {self.place(p)}" for p in self.report.problems]
        out += self.other
        for gap in self.gaps.values():
            for section, want, have in gap.lost():
                out.append(
                    f"queue {gap.name!r}: counters say {want:,} {section}, the walk reads "
                    f"{have:,}: {want - have:,} unreachable"
                )
            out += [f"queue {gap.name!r}: {d}" for d in gap.damaged[:LISTED]]
            if len(gap.damaged) > LISTED:
                out.append(f"queue {gap.name!r}: ... and {len(gap.damaged) - LISTED} more")
        return out


def salvage(path: str, *, deep: bool = True) -> Salvage:
    """Verifies the data file at ``path`` (a directory) and walks what is
    readable; never lets LMDB read it. Raises NotLmdb (and OSError) only
    when nothing can be read."""
    with DataFile(path, deep=deep) as f:
        s = Salvage(f.verify())
        for key, value in f.items(b"meta"):
            if key == b"schema":
                s.schema = value.decode(errors="replace")
        for key, value in f.items(b"queues"):
            try:
                s.names[int(json.loads(value)["id"])] = key.decode(errors="replace")
            except (ValueError, KeyError, TypeError):
                s.other.append(f"queue {key!r}: its entry in queues does not parse")
        s.gaps = {qid: Gap(name) for qid, name in s.names.items()}
        s.selectors = sum(1 for _ in f.items(b"selectors"))
        for key, value in f.items(b"state"):
            if len(key) == QID.size and len(value) == STATE.size:
                gap = s.gaps.get(QID.unpack(key)[0])
                if gap is not None:
                    gap.counters = STATE.unpack(value)
        for section in (*SECTIONS, "scheduled"):
            prev: dict[int, int] = {}
            for key, value in f.items(section.encode()):
                qid, seq = KEY.unpack(key) if len(key) == KEY.size else (-1, -1)
                gap = s.gaps.get(qid)
                if gap is None:
                    s.other.append(f"{section}: a record under key {key.hex()}, of no queue")
                    continue
                if section in gap.readable:
                    gap.readable[section] += 1  # damaged or not: reached
                try:
                    record.unseal(key, value)
                except record.Damaged as e:
                    gap.damaged.append(
                        f"{section}: the record after seq {prev.get(qid, 0)} is damaged ({e})"
                    )
                    continue
                prev[qid] = seq
        # Problems met by the salvage walk itself are already in the report.
    return s


def refusal(path: str, s: Salvage) -> str:
    """The one line a store refuses to start with on a damaged file."""
    problems = s.report.problems
    first = s.place(problems[0])
    more = f" and {len(problems) - 1} more damaged page(s)" if len(problems) > 1 else ""
    return (
        f"{path}/data.mdb is damaged: {first}{more}; msgboard check {path} lists them, "
        f"msgboard check --repair {path} sets them aside"
    )
