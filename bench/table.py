"""The table every benchmark prints: one row per figure, median of the
rounds with min and max beside it."""

from __future__ import annotations

import statistics
from typing import Any

#: Units printed as whole numbers; anything else gets three decimals.
RATES = ("msgs/s", "rows/s")


def summarize(
    rounds: list[dict[str, float]], labels: list[tuple[str, str, str]]
) -> dict[str, dict[str, Any]]:
    """Prints the table for ``labels`` (key, label, unit) over ``rounds`` and
    returns each row's median, min, max and unit by key."""
    rows: dict[str, dict[str, Any]] = {}
    print(f"{'':44} {'median':>12} {'min':>12} {'max':>12}")
    for key, label, unit in labels:
        vals = [r[key] for r in rounds]
        med = statistics.median(vals)
        rows[key] = {"median": med, "min": min(vals), "max": max(vals), "unit": unit}
        fmt = "{:>12,.0f}" if unit in RATES else "{:>12.3f}"
        cells = " ".join(fmt.format(v) for v in (med, min(vals), max(vals)))
        print(f"{label:44} {cells}  {unit}")
    return rows


def side_by_side(
    runs: list[dict[str, Any]],
    rows: list[Any],
    systems: list[str],
    tags: dict[str, str],
) -> list[dict[str, Any]]:
    """Prints the comparison table (bench/compare.py): for each row, one line
    per system with the median, min and max of its runs and msgboard's
    advantage over it, then how each system does each row. ``runs`` are
    dicts with round, workload, system and figures; ``rows`` have key, label,
    unit, cells (system -> (workload, figure)), how and higher_is_better.
    Returns the rows' figures."""
    out: list[dict[str, Any]] = []
    print(
        f"{'':52} {'median':>10} {'min':>10} {'max':>10}  msgboard advantage\n"
        f"{'':52} {'':>10} {'':>10} {'':>10}  (>1: msgboard better)"
    )
    for row in rows:
        cells: dict[str, dict[str, Any]] = {}
        for s in systems:
            if s not in row.cells:
                continue
            workload, figure = row.cells[s]
            vals = [
                r["figures"][figure]
                for r in runs
                if r["system"] == s and r["workload"] == workload and "figures" in r
            ]
            failed = sum(
                1 for r in runs if r["system"] == s and r["workload"] == workload and "error" in r
            )
            if vals or failed:
                cells[s] = {"values": vals, "failed": failed}
        if not cells:
            continue
        print(f"\n{row.label}  [{row.unit}]")
        fmt = "{:>10,.0f}" if row.unit in RATES else "{:>10.2f}"
        base = cells.get("msgboard", {}).get("values")
        ours = statistics.median(base) if base else None
        for s, cell in cells.items():
            vals = cell["values"]
            line = f"  {s:<15} {tags.get(s, ''):<34}"
            if not vals:
                print(f"{line} {'failed':>10}")
                continue
            med = statistics.median(vals)
            cell.update(median=med, min=min(vals), max=max(vals))
            nums = " ".join(fmt.format(v) for v in (med, min(vals), max(vals)))
            ratio = ""
            if ours is not None and s != "msgboard" and med and ours:
                adv = ours / med if row.higher_is_better else med / ours
                cell["msgboard_advantage"] = adv
                ratio = f"{adv:>8.2f}x"
            failed = f"  ({cell['failed']} failed)" if cell["failed"] else ""
            print(f"{line} {nums}  {ratio}{failed}")
        out.append(
            {
                "key": row.key,
                "label": row.label,
                "unit": row.unit,
                "higher_is_better": row.higher_is_better,
                "how": {s: row.how.get(s, "") for s in cells},
                "systems": cells,
            }
        )
    print("\nHow each row is measured:")
    for r in out:
        if not any(r["how"].values()):
            continue
        print(f"  {r['label'].split(' ', 1)[0]}")
        for s, how in r["how"].items():
            if s != "redis-everysec":
                print(f"     {'redis' if s == 'redis' else s:<10} {how}")
    return out
