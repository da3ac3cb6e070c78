"""The repair sweep of issue 42: damage a stopped board's ``data.mdb`` on
a copy, run ``msgboard check --repair`` on it (a subprocess), and judge
the repaired board against the clean one, record by record.

- ``records``: every record of a board (``unprocessed``, ``history``,
  ``scheduled``), read with LMDB directly: (section, key) -> raw bytes;
- ``run_repair``: the repair in a subprocess: its exit status (or signal),
  its lines, whether ``repair.tmp`` was left, the records after, whether
  it refused, and how many commits behind the sidecar the file was;
- ``judge``: the invariants. Repair never crashes and leaves no
  ``repair.tmp``; a rollback is refused or named (``lost: a rollback of
  N commit(s)``); a record of the clean board that is whole somewhere in
  the damaged file is kept; every record of the clean board missing after
  the repair is named by a ``lost:`` line (its queue and a seq range, or a
  count); a record kept in another version than the clean board's, or one
  the clean board did not have, is named by a ``restored:`` line; and
  repair says ``clean`` (exit 0) only when nothing is missing.
  ``tests/test_repair.py`` shows that ``judge`` catches each violation.

``bench/damage.py repair`` runs it over every page of the sweep board.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import lmdb

from msgboard.lmdbstore import sidecar
from msgboard.lmdbstore.layout import KEY
from msgboard.lmdbstore.pages import NODE_HEADER
from tests import sweep
from tests.sweep import ROOT

SECTIONS = ("unprocessed", "history", "scheduled")
#: Which ``lost:`` class a section's records are counted in.
CLASS = {"unprocessed": "waiting", "scheduled": "waiting", "history": "history"}
Records = dict[tuple[str, bytes], bytes]
#: The end of the violation of a record whole in the damaged file, not kept.
_UNKEPT = ": whole in the file, not kept"
DAMAGED = "$damaged"


def records(path: Path) -> tuple[Records, dict[int, str]]:
    """Every record of the closed board at ``path`` but ``$damaged``'s, and
    its queue names."""
    env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=16, subdir=True)
    out: Records = {}
    names: dict[int, str] = {}
    try:
        with env.begin() as txn:
            import json

            for key, value in txn.cursor(db=env.open_db(b"queues", txn=txn, create=False)):
                names[int(json.loads(value)["id"])] = key.decode()
            for section in SECTIONS:
                db = env.open_db(section.encode(), txn=txn, create=False)
                for key, value in txn.cursor(db=db):
                    if names.get(int.from_bytes(key[:4], "big")) != DAMAGED:
                        out[(section, bytes(key))] = bytes(value)
    finally:
        env.close()
    return out, names


def behind(path: Path) -> int:
    """How many commits the data file is behind its sidecar (0: not)."""
    from msgboard.lmdbstore.pages import NotLmdb
    from msgboard.lmdbstore.verify import DataFile

    side = sidecar.read(str(path))
    if side is None or not (path / "data.mdb").exists():
        return 0
    try:
        with DataFile(str(path)) as f:
            assert f.report.meta is not None
            return max(0, side.txnid - f.report.meta.txnid)
    except (NotLmdb, OSError):
        return 0


@dataclass
class Repaired:
    """What one repair did."""

    rc: int | None
    signal: str = ""
    lines: list[str] = field(default_factory=list)
    tmp_left: bool = False
    refused: bool = False
    #: The records and queue names after (None: refused, or unreadable).
    after: Records | None = None
    names: dict[int, str] = field(default_factory=dict)
    behind: int = 0
    #: The damaged file's bytes (to tell which records were whole in it).
    damaged: bytes = b""


def run_repair(path: Path, *, accept_rollback: bool = False, timeout: float = 600) -> Repaired:
    """``msgboard check --repair path`` in a subprocess, and what it left."""
    data = path / "data.mdb"
    damaged = data.read_bytes() if data.exists() else b""
    r = Repaired(None, behind=behind(path), damaged=damaged)
    cmd = [sys.executable, "-m", "msgboard", "check", "--repair", str(path)]
    if accept_rollback:
        cmd.append("--accept-rollback")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    r.lines = (p.stderr + p.stdout).splitlines()  # the verdict last
    if p.returncode < 0:
        r.signal = signal.Signals(-p.returncode).name
    else:
        r.rc = p.returncode
    r.tmp_left = (path / "repair.tmp").exists()
    r.refused = not list(path.glob("data.mdb.damaged-*"))
    if not r.refused:
        try:
            r.after, r.names = records(path)
        except lmdb.Error as e:
            r.lines.append(f"(the repaired board does not open: {e})")
    return r


_LOST = re.compile(r"^lost: queue '(?P<q>[^']*)' (?P<cls>waiting|history): (?P<rest>.*)$")
_RESTORED = re.compile(r"^restored: queue '(?P<q>[^']*)' (?P<cls>waiting|history): (?P<rest>.*)$")
_RANGE = re.compile(r"(?:unprocessed|history|scheduled)? ?seqs (\d+) (?:to (\d+)|on)")


def _ranges(text: str) -> list[tuple[int, float]]:
    return [(int(a), float(b) if b else float("inf")) for a, b in _RANGE.findall(text)]


def _count(text: str) -> float:
    if "an unknown number" in text:
        return float("inf")
    m = re.match(r"([\d,]+) of the", text)
    return int(m.group(1).replace(",", "")) if m else 0


def judge(clean: Records, names: dict[int, str], r: Repaired) -> list[str]:
    """Judges one repair of a damaged copy of the board whose records were
    ``clean`` (queue ids ``names``); the invariants broken."""
    v: list[str] = []
    text = "\n".join(r.lines)
    if r.signal:
        v.append(f"repair died by {r.signal}")
    elif r.rc not in (0, 1) or "Traceback" in text:
        v.append(f"repair crashed (exit {r.rc}): {text[-300:]!r}")
    if r.tmp_left:
        v.append("repair.tmp left behind")
    rollback = any(line.startswith("lost: a rollback of ") for line in r.lines)
    if r.refused:
        if r.behind and "--accept-rollback" not in text:
            v.append("a rollback refused without naming --accept-rollback")
        return v
    if r.behind and not rollback:
        v.append(f"a silent rollback of {r.behind} commit(s)")
    if r.after is None:
        return [*v, "the repaired board does not open"]
    if rollback:
        return v  # the older commit, named as such: records are compared no further
    lost: dict[tuple[str, str], list[str]] = {}
    restored: dict[tuple[str, str], list[str]] = {}
    for line in r.lines:
        if m := _LOST.match(line):
            lost.setdefault((m["q"], m["cls"]), []).append(m["rest"])
        elif m := _RESTORED.match(line):
            restored.setdefault((m["q"], m["cls"]), []).append(m["rest"])
    every_queue = any(line.startswith("lost: queues:") for line in r.lines)
    missing: dict[tuple[str, str], list[int]] = {}
    changed: dict[tuple[str, str], list[int]] = {}
    kept_whole = 0

    # Records by queue name and seq (a queue id may differ after a repair)
    def named(key: bytes, ids: dict[int, str]) -> tuple[str, int]:
        qid = int.from_bytes(key[:4], "big")
        return ids.get(qid, f"id {qid}"), int.from_bytes(key[4:], "big")

    # A queue whose entry was lost is kept under a new name, said so
    ids = dict(r.names)
    for line in r.lines:
        if m := re.match(r"lost: queue id (\d+): .* kept in the new queue '([^']+)'", line):
            ids[int(m[1])] = names.get(int(m[1]), m[2])
    after_by = {named(key, ids): (s, value) for (s, key), value in r.after.items()}
    clean_keys = set()
    for (section, key), value in clean.items():
        name, seq = named(key, names)
        clean_keys.add((name, seq))
        where = (name, CLASS[section])
        got = after_by.get((name, seq))
        if got == (section, value):
            kept_whole += 1
            continue
        if got is None:
            missing.setdefault(where, []).append(seq)
            if value in r.damaged:
                v.append(f"queue {where[0]!r} {section} seq {seq}{_UNKEPT}")
        else:
            changed.setdefault(where, []).append(seq)
    for (name, seq), (section, _value) in after_by.items():
        if (name, seq) not in clean_keys:
            changed.setdefault((name, CLASS[section]), []).append(seq)
    for where, seqs in missing.items():
        texts = lost.get(where, [])
        ranges = [rg for t in texts for rg in _ranges(t)]
        count = sum(_count(t) for t in texts)
        gone = every_queue and where[0] not in r.names.values()
        named = gone or all(any(a <= s <= b for a, b in ranges) for s in seqs)
        if not named and len(seqs) > count:
            v.append(
                f"queue {where[0]!r} {where[1]}: {len(seqs)} record(s) lost silently "
                f"(seqs {sorted(seqs)[:5]}...)"
            )
    for where, seqs in changed.items():
        ranges = [rg for t in restored.get(where, []) for rg in _ranges(t)]
        silent = [s for s in seqs if not any(a <= s <= b for a, b in ranges)]
        if silent:
            v.append(
                f"queue {where[0]!r} {where[1]}: {len(silent)} record(s) in another version "
                f"than the board's last, silently (seqs {sorted(silent)[:5]})"
            )
    said_clean = r.rc == 0 or (r.lines and r.lines[-1] == "clean")
    if (missing or changed) and said_clean:
        v.append("repair says clean, yet records are missing or older")
    return v


def hiding_flips(board: Path, pages: dict[int, str], kind: str, seed: int, tmp: Path) -> list[int]:
    """The leaves of ``kind`` whose seeded flip (``sweep.flip``) ends in a
    node's header or key, its value whole: the flips that hide a whole
    record from a node-by-node read (found on a copy at ``tmp``)."""
    probe = sweep.copy(board, tmp)
    size = sweep.psize(board)
    out = []
    for pgno in sorted(p for p, k in pages.items() if k == kind):
        with open(probe / "data.mdb", "rb") as f:
            f.seek(pgno * size)
            before = f.read(size)
        sweep.flip(probe, pgno, seed)
        with open(probe / "data.mdb", "r+b") as f:
            f.seek(pgno * size)
            after = f.read(size)
            f.seek(pgno * size)
            f.write(before)
        end = max(i for i in range(size) if before[i] != after[i]) + 1
        lower = int.from_bytes(before[12:14], sys.byteorder)
        starts = [int.from_bytes(before[i : i + 2], sys.byteorder) for i in range(16, lower, 2)]
        if any(o < end <= o + NODE_HEADER + KEY.size for o in starts):
            out.append(pgno)
    return out


def summary(results: list[tuple[str, Repaired, list[str]]]) -> list[str]:
    """The sweep's figures: repairs, whole, refused, crashes, violations."""
    n = len(results)
    whole = sum(1 for _, r, _ in results if r.rc == 0)
    refused = sum(1 for _, r, _ in results if r.refused)
    crashes = sum(1 for _, _, v in results if any("crash" in x or "died" in x for x in v))
    silent = sum(1 for _, _, v in results if any("silent" in x for x in v))
    broken = sum(1 for _, _, v in results if v)
    unkept = [sum(1 for x in v if x.endswith(_UNKEPT)) for _, _, v in results]
    return [
        f"{n} repairs: {whole} whole (exit 0), {n - whole - refused} with named losses "
        f"(exit 1), {refused} refused",
        f"{crashes} crashes, {silent} with a silent loss or rollback, {broken} with any violation",
        f"{sum(1 for u in unkept if u)} with records whole in the file not kept "
        f"({sum(unkept)} records)",
    ]
