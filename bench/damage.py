"""The damage sweep and the corruption table of issue 23, in full: the
harness of ``tests/sweep.py`` (a board of two queues, damages on copies,
``msgboard check`` and a real server as probes, the judge), run over every
page of the board or every row of the table. ``tests/test_damage.py`` runs
a sample of the same.

    .venv/bin/python bench/damage.py sweep [--mode zero|flip] [--seed 6]
    .venv/bin/python bench/damage.py table
    .venv/bin/python bench/damage.py repair [--mode zero|flip] [--per-kind N] [--kind KIND]

``repair`` (issue 42) damages every page in turn (or ``--per-kind N`` of
each kind; ``--kind "history leaf"``: only pages of that kind, repeated
for more), runs ``msgboard check --repair --accept-rollback`` on the copy
and judges the repaired board against the clean one, record by record
(``tests/repairsweep.py``).

Each prints a Markdown table (the figures of docs/operating.md), then every
violation found, if any. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import repairsweep, sweep

DONE = {"zero": "zeroed", "flip": "flipped"}


def _said(served: dict[str, Any], path: str) -> str:
    """The server's refusal line (cut short), or the damage it counted."""
    if "refused" in served:
        line = str(served["refused"]).replace(path, "DIR")
        return "`" + (line if len(line) < 110 else line[:107] + "...") + "`"
    counted = {n: q.get("damaged", 0) for n, q in served.get("queues", {}).items()}
    return ", ".join(f"{n}: damaged {d}" for n, d in counted.items() if d) or "-"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("sweep", "table", "repair"))
    p.add_argument("--per-kind", type=int, default=0, help="repair: a sample of N pages a kind")
    p.add_argument("--kind", action="append", help="repair: only pages of this kind (repeatable)")
    p.add_argument("--board", help="repair: the board to damage (built there if missing)")
    p.add_argument("--part", default="0/1", help="repair: pages I, I+N, ... (I/N), in parallel")
    p.add_argument("--mode", choices=("zero", "flip"), default="zero")
    p.add_argument("--seed", type=int, default=6, help="where --mode flip flips")
    a = p.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        board = Path(a.board) if a.board else Path(tmp) / "board"
        if not board.exists():
            sweep.build(board)
        pages = sweep.kinds(board)
        broken: list[str] = []
        if a.what == "repair":
            broken = _repairs(board, pages, Path(tmp), a)
            print()
            print(f"{len(broken)} violation(s); {time.monotonic() - started:.0f} s")
            print("\n".join(broken))
            return 0
        clean = sweep.run_serve(sweep.copy(board, Path(tmp) / "clean"))
        if a.what == "sweep":
            results = {}
            for pgno in sorted(pages):
                copy = sweep.copy(board, Path(tmp) / "copy")
                if a.mode == "zero":
                    sweep.zero(copy, pgno)
                else:
                    sweep.flip(copy, pgno, a.seed)
                checked = sweep.run_check(copy)
                verdict = sweep.judge(clean, sweep.run_serve(copy), checked)
                results[pgno] = (checked, verdict)
                broken += [f"page {pgno} ({pages[pgno]}): {v}" for v in verdict.violations]
            print(f"{len(pages)} pages, each {DONE[a.mode]} in turn on a copy of the board")
            print()
            print("\n".join(sweep.rows(pages, results)))
        else:
            print("| damage | msgboard check | server | what the server said | violations |")
            print("| --- | --- | --- | --- | --- |")
            for name, damage, allowed in sweep.TABLE:
                copy = sweep.copy(board, Path(tmp) / "copy")
                damage(copy, pages)
                checked = sweep.run_check(copy)
                served = sweep.run_serve(copy)
                verdict = sweep.judge(clean, served, checked)
                check = checked.signal or f"exit {checked.rc}"
                if verdict.outcome not in allowed:
                    verdict.violations.append(f"{verdict.outcome}, allowed {sorted(allowed)}")
                broken += [f"{name}: {v}" for v in verdict.violations]
                said = _said(served, str(copy))
                print(
                    f"| {name} | {check} | {verdict.outcome} | {said} | {len(verdict.violations)} |"
                )
    print()
    print(f"{len(broken)} violation(s); {time.monotonic() - started:.0f} s")
    print("\n".join(broken))
    return 0


def _repairs(board: Path, pages: dict[int, str], tmp: Path, a: argparse.Namespace) -> list[str]:
    """The repair sweep: prints its table; the violations."""
    clean = repairsweep.records(board)
    chosen = sweep.pick(pages, a.per_kind, seed=a.seed) if a.per_kind else sorted(pages)
    if a.kind:
        unknown = set(a.kind) - set(pages.values())
        if unknown:
            raise SystemExit(f"no page of kind {sorted(unknown)}: {sorted(set(pages.values()))}")
        chosen = [p for p in chosen if pages[p] in a.kind]
    i, n = map(int, a.part.split("/"))
    chosen = chosen[i::n]
    results = []
    by: dict[str, dict[str, int]] = {}
    for pgno in chosen:
        copy = sweep.copy(board, tmp / "copy")
        if a.mode == "zero":
            sweep.zero(copy, pgno)
        else:
            sweep.flip(copy, pgno, a.seed)
        r = repairsweep.run_repair(copy, accept_rollback=True)
        v = repairsweep.judge(*clean, r)
        results.append((f"page {pgno} ({pages[pgno]})", r, v))
        print(f"page {pgno} ({pages[pgno]}): exit {r.rc}, {len(v)} violation(s)", file=sys.stderr)
        k = by.setdefault(pages[pgno], dict.fromkeys(("pages", "whole", "named", "violations"), 0))
        k["pages"] += 1
        k["whole" if r.rc == 0 else "named"] += 1
        k["violations"] += bool(v)
    print(f"{len(chosen)} pages, each {DONE[a.mode]} in turn on a copy of the board, then repaired")
    print()
    print("| page kind | pages | repaired whole (exit 0) | losses named (exit 1) | violations |")
    print("| --- | --- | --- | --- | --- |")
    for kind in sorted(by):
        k = by[kind]
        print(f"| {kind} | {k['pages']} | {k['whole']} | {k['named']} | {k['violations']} |")
    print()
    print("\n".join(repairsweep.summary(results)))
    return [f"{name}: {x}" for name, _, vs in results for x in vs]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
