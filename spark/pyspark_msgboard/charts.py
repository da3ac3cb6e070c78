"""The report's charts: one PNG per table, drawn with matplotlib (Agg, no
display), sized for a page and labelled so they read without the tables."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: The deliveries chart's words for messages delivered once or not yet.
NOT_REDELIVERED = "not redelivered (delivered once, or waiting)"
#: Queues or addresses drawn by name; the rest are summed as "other".
TOP = 8
HEAT_ROWS = 15


def _top(frame: pd.DataFrame, key: str, value: str, n: int, time: str) -> pd.DataFrame:
    """Rows of the ``n`` biggest ``key``s by ``value``, the rest as "other"."""
    totals = frame.groupby(key)[value].sum().sort_values(ascending=False)
    keep = set(totals.index[:n])
    out = frame.copy()
    out[key] = out[key].where(out[key].isin(keep), "other")
    return out.groupby([key, time], as_index=False)[value].sum()


def _traffic(ax: Any, frame: pd.DataFrame) -> None:
    # By hour, or by minute when the report gives a ``minute`` column (a
    # short span, report.SHORT_US: hours would draw flat blocks).
    time = "minute" if "minute" in frame.columns else "hour"
    top = _top(frame, "queue", "posted", TOP, time)
    wide = top.pivot(index=time, columns="queue", values="posted").fillna(0).sort_index()
    order = wide.sum().sort_values(ascending=False).index
    wide = wide[order]
    import matplotlib.dates as mdates

    # Stacked bars, one per time bucket (an hour, or a minute for a short
    # span: report.SHORT_US), as wide as the bucket.
    width = 1 / (24 * 60) if time == "minute" else 1 / 24
    bottom = None
    for queue in wide.columns:
        ax.bar(wide.index, wide[queue], width=width, align="edge", bottom=bottom, label=queue)
        bottom = wide[queue] if bottom is None else bottom + wide[queue]
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
    ax.set_ylabel(f"messages posted per {time} (UTC)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def _latency(ax: Any, frame: pd.DataFrame) -> None:
    import numpy as np

    f = frame.sort_values("p99_ms")
    y = np.arange(len(f))
    h = 0.27
    for i, (col, color) in enumerate(
        (("p50_ms", "#4c9be8"), ("p95_ms", "#f0a33b"), ("p99_ms", "#d9534f"))
    ):
        ax.barh(y + (i - 1) * h, f[col], height=h, color=color, label=col[:3])
    ax.set_yticks(y, [str(q) for q in f["queue"]])
    ax.set_xlabel("milliseconds from post to processed")
    if len(f) and f["p99_ms"].max() > 50 * max(f["p50_ms"].min(), 1e-3):
        ax.set_xscale("log")
    ax.legend(frameon=False)


def _deliveries(ax: Any, frame: pd.DataFrame) -> None:
    import numpy as np

    f = frame.sort_values("messages")
    y = np.arange(len(f))
    once = f["messages"] - f["redelivered"]
    colors = ["#8a8a8a" if d else "#4c9be8" for d in f["dead_letter_queue"]]
    ax.barh(y, once, color=colors, label=NOT_REDELIVERED)
    ax.barh(y, f["redelivered"], left=once, color="#d9534f", label="redelivered")
    from matplotlib.patches import Patch

    # One legend entry per colour actually drawn, named for what it means.
    legend = [Patch(color="#4c9be8", label=NOT_REDELIVERED)]
    if f["dead_letter_queue"].any():
        legend.append(Patch(color="#8a8a8a", label="in a dead-letter queue"))
    legend.append(Patch(color="#d9534f", label="redelivered"))
    ax.set_yticks(
        y,
        [
            f"{q} (dead letters)" if d else str(q)
            for q, d in zip(f["queue"], f["dead_letter_queue"], strict=True)
        ],
    )
    ax.set_xlabel("messages")
    ax.legend(handles=legend, frameon=False)


def _addresses(ax: Any, frame: pd.DataFrame) -> None:
    totals = frame.groupby("address")["posted"].sum().sort_values(ascending=False)
    keep = totals.index[:HEAT_ROWS]
    f = frame[frame["address"].isin(keep)]
    wide = f.pivot_table(index="address", columns="hour", values="posted", aggfunc="sum")
    wide = wide.reindex(keep).fillna(0)
    im = ax.imshow(wide.values, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_yticks(range(len(wide.index)), [a or "(no address)" for a in wide.index])
    hours = list(wide.columns)
    step = max(1, len(hours) // 8)
    ax.set_xticks(range(0, len(hours), step), [f"{h:%m-%d %H:00}" for h in hours[::step]])
    ax.set_xlabel("hour (UTC)")
    ax.figure.colorbar(im, ax=ax, label="posted per hour")


def _scale(ax: Any, values: pd.Series) -> None:
    """A log scale where a linear one would hide the small bars (the
    largest more than 50 times the smallest non-zero)."""
    shown = values[values > 0]
    if len(shown) and shown.max() > 50 * shown.min():
        ax.set_xscale("log")


def _shapes(ax: Any, frame: pd.DataFrame) -> None:
    f = frame.iloc[::-1]  # every row of the table, the commonest on top
    bars = ax.barh(range(len(f)), f["messages"], color="#5cb85c")
    ax.bar_label(bars, labels=[f"{n:,}" for n in f["messages"]], padding=3, fontsize=8)
    ax.set_yticks(range(len(f)), list(f["shape"]))
    ax.set_xlabel("messages")
    _scale(ax, f["messages"])


DRAW = {
    "traffic_queue": (_traffic, (10, 4.2)),
    "latency": (_latency, (10, 0)),
    "deliveries": (_deliveries, (10, 0)),
    "traffic_address": (_addresses, (10, 0)),
    "shapes": (_shapes, (10, 0)),
}


def draw(frames: dict[str, pd.DataFrame], out: str) -> dict[str, str]:
    """Draws each non-empty table's chart into ``out``; returns the file
    names by table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pngs = {}
    for name, (fn, (w, h)) in DRAW.items():
        frame = frames[name]
        if frame.empty:
            continue
        rows = frame[frame.columns[0]].nunique() if name != "shapes" else len(frame)
        height = h or min(
            12.0, 1.2 + 0.38 * min(rows, HEAT_ROWS if name == "traffic_address" else 40)
        )
        fig, ax = plt.subplots(figsize=(w, height), layout="constrained")
        try:
            fn(ax, frame)
            ax.spines[["top", "right"]].set_visible(False)
            fig.savefig(os.path.join(out, f"{name}.png"), dpi=110)
        finally:
            plt.close(fig)
        pngs[name] = f"{name}.png"
    return pngs
