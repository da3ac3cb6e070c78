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
