"""The report's charts: one SVG file per table, written as text (no
plotting library: importing matplotlib and drawing five PNGs cost about
1.5 s of CPU a night, most of a small night's report), sized for a page
and labelled so they read without the tables."""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: The deliveries chart's words for messages delivered once or not yet.
NOT_REDELIVERED = "not redelivered (delivered once, or waiting)"
#: Queues or addresses drawn by name; the rest are summed as "other".
TOP = 8
HEAT_ROWS = 15
#: Width of every chart, px; a row of horizontal bars is ROW px high.
WIDTH = 1000
ROW = 24
PALETTE = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2",
    "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac",
)  # fmt: skip
#: Viridis, at 0, 0.25, 0.5, 0.75 and 1: the heat map's colours between.
_VIRIDIS = ((68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37))


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _svg(height: float, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="DejaVu Sans, Arial, sans-serif" '
        f'font-size="12">\n<rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join(body)
        + "\n</svg>\n"
    )


def _text(x: float, y: float, text: object, anchor: str = "start", **attrs: object) -> str:
    more = "".join(f' {k.replace("_", "-")}="{_e(v)}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{more}>{_e(text)}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str, title: str = "") -> str:
    tip = f"<title>{_e(title)}</title>" if title else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
        f'fill="{fill}">{tip}</rect>'
    )


def _line(x1: float, y1: float, x2: float, y2: float, color: str = "#555") -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}"/>'


def _label_width(labels: Sequence[str]) -> float:
    """Room for the longest of ``labels`` at 12 px (about 7 px a character)."""
    return min(320.0, 12.0 + 7.0 * max((len(s) for s in labels), default=0))


def _nice(top: float) -> float:
    """A round number at or above ``top`` (1, 2 or 5 times a power of ten)."""
    if top <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(top))
    return next(float(m * power) for m in (1, 2, 5, 10) if m * power >= top)


def _count(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


class _Scale:
    """Values to x positions between ``left`` and ``right``: linear from 0,
    or logarithmic (the largest value more than 50 times the smallest
    non-zero one)."""

    def __init__(self, values: Sequence[float], left: float, right: float, log: bool) -> None:
        shown = [v for v in values if v > 0]
        self.left, self.right = left, right
        self.log = log and bool(shown) and max(shown) > 50 * min(shown)
        if self.log:
            self.lo = 10.0 ** math.floor(math.log10(min(shown)))
            self.hi = 10.0 ** math.ceil(math.log10(max(shown)))
            if self.hi <= self.lo:
                self.hi = self.lo * 10
        else:
            self.lo, self.hi = 0.0, _nice(max(shown, default=1.0))

    def x(self, v: float) -> float:
        span = self.right - self.left
        if self.log:
            if v <= self.lo:
                return self.left
            return self.left + span * math.log10(v / self.lo) / math.log10(self.hi / self.lo)
        return self.left + span * v / self.hi

    def ticks(self) -> list[float]:
        if self.log:
            n = round(math.log10(self.hi / self.lo))
            return [self.lo * 10**i for i in range(n + 1)]
        return [self.hi * i / 5 for i in range(6)]


def _x_axis(
    s: _Scale, top: float, bottom: float, label: str, fmt: Callable[[float], str]
) -> list[str]:
    out = []
    for t in s.ticks():
        x = s.x(t)
        out.append(_line(x, top, x, bottom, "#e6e6e6"))
        out.append(_text(x, bottom + 15, fmt(t), "middle"))
    scale = " (log scale)" if s.log else ""
    out.append(_text((s.left + s.right) / 2, bottom + 33, label + scale, "middle"))
    return out


def _legend(x: float, y: float, entries: Sequence[tuple[str, str]]) -> list[str]:
    out = []
    for i, (name, color) in enumerate(entries):
        out.append(_rect(x, y + i * 18, 12, 12, color))
        out.append(_text(x + 18, y + i * 18 + 10, name, font_size=11))
    return out


def _bars(
    labels: list[str],
    series: list[tuple[str, str, list[float]]],
    *,
    stacked: bool,
    xlabel: str,
    fmt: Callable[[float], str] = _count,
    log: bool = False,
    colors: list[str] | None = None,
    legend: list[tuple[str, str]] | None = None,
    notes: list[str] | None = None,
) -> str:
    """Horizontal bars, one row per label (the first on top): ``series``
    side by side, or ``stacked``; ``colors`` overrides the first series'
    colour per row; ``notes`` are written at the end of each row."""
    left = _label_width(labels)
    key = legend if legend is not None else [(name, color) for name, color, _ in series]
    right = WIDTH - (20 + 7 * max((len(n) for n, _ in key), default=0) if key else 20) - 30
    top, height = 14.0, ROW * len(labels)
    totals = [sum(vs) for vs in zip(*(v for _, _, v in series), strict=True)] if stacked else []
    scale = _Scale(totals or [v for _, _, vs in series for v in vs], left, right, log)
    body = _x_axis(scale, top, top + height, xlabel, fmt)
    inner = ROW * 0.8 / (1 if stacked else len(series))
    for i, label in enumerate(labels):
        y = top + i * ROW + ROW * 0.1
        body.append(_text(left - 6, top + i * ROW + ROW / 2 + 4, label, "end"))
        start = 0.0
        for j, (name, color, values) in enumerate(series):
            v = values[i]
            fill = colors[i] if colors is not None and j == 0 else color
            if stacked:
                x0, x1 = scale.x(start), scale.x(start + v)
                body.append(_rect(x0, y, x1 - x0, inner, fill, f"{label}: {name} {fmt(v)}"))
                start += v
            else:
                x1 = scale.x(v)
                tip = f"{label}: {name} {fmt(v)}"
                body.append(_rect(left, y + j * inner, x1 - left, inner, fill, tip))
        if notes:
            end = scale.x(start) if stacked else max(scale.x(vs[i]) for _, _, vs in series)
            body.append(_text(end + 4, top + i * ROW + ROW / 2 + 4, notes[i], font_size=11))
    body.append(_line(left, top, left, top + height))
    body += _legend(right + 30, top, key)
    return _svg(top + height + 44, body)


def _traffic(frame: pd.DataFrame) -> str:
    # By hour, or by minute when the report gives a ``minute`` column (a
    # short span, report.SHORT_US: hours would draw flat blocks).
    time = "minute" if "minute" in frame.columns else "hour"
    totals = frame.groupby("queue")["posted"].sum().sort_values(ascending=False)
    names = [str(q) for q in totals.index[:TOP]] + (["other"] if len(totals) > TOP else [])
    f = frame.assign(queue=frame["queue"].where(frame["queue"].isin(totals.index[:TOP]), "other"))
    wide = f.pivot_table(index=time, columns="queue", values="posted", aggfunc="sum").fillna(0)
    buckets = sorted(wide.index)
    step = 60 if time == "minute" else 3600
    first, last = buckets[0], buckets[-1]
    n = int((last - first).total_seconds() // step) + 1  # every bucket, the empty ones too
    left, right, top, bottom = 70.0, WIDTH - 190.0, 14.0, 314.0
    stack = [sum(float(wide.at[b, q]) for q in wide.columns) for b in buckets]
    y = _Scale(stack, 0.0, bottom - top, False)
    width = (right - left) / n
    body = []
    for t in y.ticks():
        yy = bottom - y.x(t)
        body.append(_line(left, yy, right, yy, "#e6e6e6"))
        body.append(_text(left - 6, yy + 4, _count(t), "end"))
    colors = {q: PALETTE[i % len(PALETTE)] for i, q in enumerate(names)}
    for b in buckets:
        x = left + width * ((b - first).total_seconds() // step)
        base = 0.0
        for q in names:
            v = float(wide.at[b, q]) if q in wide.columns else 0.0
            if v:
                tip = f"{b:%Y-%m-%d %H:%M} {q}: {v:,.0f}"
                body.append(_rect(x, bottom - y.x(base + v), width, y.x(v), colors[q], tip))
                base += v
    marks = max(1, n // 8)
    fmt = "%m-%d %H:%M"
    for i in range(0, n, marks):
        x = left + width * i
        when = datetime.fromtimestamp(first.timestamp() + i * step, UTC)
        body.append(_line(x, bottom, x, bottom + 4))
        body.append(_text(x, bottom + 16, when.strftime(fmt), "middle"))
    body.append(_line(left, bottom, right, bottom))
    body.append(_text(left, bottom + 34, f"messages posted per {time} (UTC)"))
    body += _legend(right + 20, top, [(q, colors[q]) for q in names])
    return _svg(bottom + 44, body)


def _ms(v: float) -> str:
    """Milliseconds in a readable unit."""
    if v >= 60_000:
        return f"{v / 60_000:.3g} min"
    if v >= 1000:
        return f"{v / 1000:.3g} s"
    if v >= 1:
        return f"{v:.3g} ms"
    return f"{v * 1000:.3g} µs"


def _latency(frame: pd.DataFrame) -> str:
    f = frame.sort_values("p99_ms", ascending=False)
    series = [
        (col[:3], color, [float(v) for v in f[col]])
        for col, color in (("p50_ms", "#4c9be8"), ("p95_ms", "#f0a33b"), ("p99_ms", "#d9534f"))
    ]
    labels = [str(q) for q in f["queue"]]
    return _bars(labels, series, stacked=False, xlabel="from post to processed", fmt=_ms, log=True)


def _deliveries(frame: pd.DataFrame) -> str:
    f = frame.sort_values("messages", ascending=False)
    once = [float(m - r) for m, r in zip(f["messages"], f["redelivered"], strict=True)]
    dead = [bool(d) for d in f["dead_letter_queue"]]
    legend = [(NOT_REDELIVERED, "#4c9be8")]
    if any(dead):
        legend.append(("in a dead-letter queue", "#8a8a8a"))
    legend.append(("redelivered", "#d9534f"))
    labels = [f"{q} (dead letters)" if d else str(q) for q, d in zip(f["queue"], dead, strict=True)]
    series = [
        (NOT_REDELIVERED, "#4c9be8", once),
        ("redelivered", "#d9534f", [float(v) for v in f["redelivered"]]),
    ]
    colors = ["#8a8a8a" if d else "#4c9be8" for d in dead]
    return _bars(labels, series, stacked=True, xlabel="messages", colors=colors, legend=legend)


def _shapes(frame: pd.DataFrame) -> str:
    labels = [str(s) for s in frame["shape"]]  # every row of the table, the commonest on top
    values = [float(v) for v in frame["messages"]]
    notes = [f"{int(v):,}" for v in values]
    series = [("messages", "#5cb85c", values)]
    return _bars(labels, series, stacked=False, xlabel="messages", log=True, legend=[], notes=notes)


def _viridis(x: float) -> str:
    x = min(max(x, 0.0), 1.0) * (len(_VIRIDIS) - 1)
    i = min(int(x), len(_VIRIDIS) - 2)
    a, b, t = _VIRIDIS[i], _VIRIDIS[i + 1], x - i
    return "#" + "".join(f"{round(p + (q - p) * t):02x}" for p, q in zip(a, b, strict=True))


def _addresses(frame: pd.DataFrame) -> str:
    totals = frame.groupby("address")["posted"].sum().sort_values(ascending=False)
    keep = list(totals.index[:HEAT_ROWS])
    f = frame[frame["address"].isin(keep)]
    wide = f.pivot_table(index="address", columns="hour", values="posted", aggfunc="sum")
    wide = wide.reindex(keep).fillna(0)
    hours = list(wide.columns)
    labels = [str(a) or "(no address)" for a in keep]
    left, right, top = _label_width(labels), WIDTH - 120.0, 14.0
    cell_w, cell_h = (right - left) / max(1, len(hours)), float(ROW)
    most = float(wide.values.max()) if wide.size else 0.0
    body = []
    for i, a in enumerate(keep):
        body.append(_text(left - 6, top + i * cell_h + cell_h / 2 + 4, labels[i], "end"))
        for j, h in enumerate(hours):
            v = float(wide.at[a, h])
            tip = f"{labels[i]}, {h:%Y-%m-%d %H:00}: {v:,.0f}"
            color = _viridis(v / most if most else 0.0)
            x, y = left + j * cell_w, top + i * cell_h
            body.append(_rect(x, y, cell_w + 0.5, cell_h + 0.5, color, tip))
    bottom = top + cell_h * len(keep)
    step = max(1, len(hours) // 8)
    for j in range(0, len(hours), step):
        x = left + (j + 0.5) * cell_w
        body.append(_text(x, bottom + 16, f"{hours[j]:%m-%d %H:00}", "middle"))
    body.append(_text((left + right) / 2, bottom + 34, "hour (UTC)", "middle"))
    for k in range(10):  # the colour bar, posted per hour
        body.append(_rect(right + 30, top + (9 - k) * 14, 16, 14.5, _viridis(k / 9)))
    body.append(_text(right + 52, top + 10, f"{most:,.0f}"))
    body.append(_text(right + 52, top + 140, "0"))
    body.append(_text(right + 30, top + 160, "posted per hour", font_size=11))
    return _svg(max(bottom + 44, top + 170), body)


DRAW: dict[str, Callable[[Any], str]] = {
    "traffic_queue": _traffic,
    "latency": _latency,
    "deliveries": _deliveries,
    "traffic_address": _addresses,
    "shapes": _shapes,
}


def draw(frames: dict[str, pd.DataFrame], out: str) -> dict[str, str]:
    """Writes each non-empty table's chart into ``out``; returns the file
    names by table."""
    files = {}
    for name, fn in DRAW.items():
        frame = frames[name]
        if frame.empty:
            continue
        with open(os.path.join(out, f"{name}.svg"), "w") as f:
            f.write(fn(frame))
        files[name] = f"{name}.svg"
    return files
