"""The report's figures kept beside the dataset, one small file per data
file, so that a night's report costs what the night changed.

A data file of the dataset (``dataset.py``) holds one queue generation's
rows of one section and one day, and is never changed once written: a
night hard-links it into the next version, or writes a new file in its
place. So its aggregates, computed once, hold for as long as it does.
``fill`` (the export's last step) gives every data file of a new version
its aggregates, ``_msgboard/aggregates/REL.json``: hard-linked with the
file they describe when it was carried over, computed (pyarrow, in this
process, reading a few columns) for a file the night wrote. ``merge`` (the
report) sums them into the report's tables with pandas: an idle night reads
small JSON files only, and no Spark.

What a file's aggregates hold (per file: one queue, one generation):

- ``traffic``: per address and minute (UTC, µs since the epoch / 60 s),
  messages posted, and per address and minute of ``processed_at``, processed;
- ``counts``: rows, redelivered, the highest delivery count, and the
  history rows by how they left (``EXITS``);
- ``latency``: of the processed rows (acked or taken): count, sum and max
  in µs, and a histogram of µs in log buckets of ratio GAMMA (bucket 0:
  0 µs), from which the percentiles are read to within 1% of the value;
- ``letters``: rows by the ``x-dead-letter-queue`` and
  ``x-dead-letter-reason`` headers (null: none);
- ``shapes``: rows by tuple shape, e.g. ``(string, int)``;
- ``first``/``last``: the earliest and latest ``posted_at``, µs.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from pyspark_msgboard import dataset
from pyspark_msgboard.snapfile import SECTIONS

#: Where a data file's aggregates are, inside the dataset: ``AGG/REL.json``.
AGG = os.path.join("_msgboard", "aggregates")
#: The ratio of a latency bucket's bounds: percentiles within 1% of the value.
GAMMA = 1.01
_LOG_GAMMA = math.log(GAMMA)
#: The ``exit`` values counted as processed (consumed): latency is theirs.
PROCESSED = ("acked", "taken")
#: How a history row left, as ``deliveries`` counts it.
EXITS = ("processed", "moved", "dead_lettered", "expired", "dropped", "not_recorded")
#: The headers the board sets when it dead-letters a message (engine/overflow.py).
SOURCE = "x-dead-letter-queue"
REASON = "x-dead-letter-reason"
MINUTE = 60_000_000
#: The columns a file's aggregates read (leaf paths): never bodies or values.
COLUMNS = [
    "queue_id",
    "address",
    "posted_at",
    "processed_at",
    "delivery_count",
    "exit",
    "headers.key_value.key",
    "headers.key_value.value",
    "tuple.list.element.type",
]


def where(root: str, rel: str) -> str:
    """The aggregates file of the data file ``rel`` of the dataset at ``root``."""
    return os.path.join(root, AGG, f"{rel}.json")


def bucket(us: np.ndarray) -> np.ndarray:
    """The latency buckets of ``us`` (int64 µs): 0 for 0 or less, else
    ceil(log_GAMMA(us)), so bucket b holds (GAMMA^(b-1), GAMMA^b]."""
    safe = np.maximum(us, 1).astype(np.float64)
    b = np.ceil(np.log(safe) / _LOG_GAMMA - 1e-9).astype(np.int64) + 1
    return np.where(us <= 0, 0, b)


def value(b: int) -> float:
    """A bucket's value (µs): the middle of its bounds (0 for bucket 0)."""
    if b <= 0:
        return 0.0
    return float(GAMMA ** (b - 1.5) * (1 + GAMMA) / 2)


def compute(path: str, section: str) -> dict[str, Any]:
    """The aggregates of the data file at ``path`` (of ``section``)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    leaves = {f.schema.column(i).path for i in range(f.metadata.num_columns)}
    t = f.read(columns=[c for c in COLUMNS if c in leaves])
    n = t.num_rows
    none = pa.nulls(n, pa.string())
    qid = None
    if "queue_id" in t.column_names and n:
        qid = t["queue_id"][0].as_py()
    posted = pc.cast(t["posted_at"], pa.int64())
    done = pc.cast(t["processed_at"], pa.int64())
    minute = pa.scalar(MINUTE, pa.int64())
    exits = t["exit"] if "exit" in t.column_names else none
    deliveries = t["delivery_count"].fill_null(0)

    traffic: dict[tuple[str, int], list[int]] = {}
    for a, m, k in _count(t["address"], pc.divide(posted, minute)):
        traffic.setdefault((a, m), [0, 0])[0] += k
    ok = pc.is_valid(done)
    for a, m, k in _count(pc.filter(t["address"], ok), pc.divide(pc.filter(done, ok), minute)):
        traffic.setdefault((a, m), [0, 0])[1] += k

    history = section == "history"
    consumed = pc.fill_null(pc.is_in(exits, pa.array(PROCESSED)), False)
    ways = {name: 0 for name in EXITS}
    for kind, k in _count(exits):
        if kind in PROCESSED:
            ways["processed"] += k
        elif kind is None:
            ways["not_recorded"] += k if history else 0
        elif kind in ways:
            ways[kind] += k
    counts = {
        "messages": n,
        "unprocessed": 0 if history else n,
        "redelivered": int(pc.sum(pc.greater(deliveries, 1)).as_py() or 0),
        "most_deliveries": pc.max(deliveries).as_py() if n else None,
        **ways,
    }
    lat = pc.subtract(pc.filter(done, consumed), pc.filter(posted, consumed))
    lat_np = np.asarray(lat.to_numpy(zero_copy_only=False), np.int64)
    b, k = np.unique(bucket(lat_np), return_counts=True)
    latency = {
        "count": len(lat_np),
        "sum_us": int(lat_np.sum()),
        "max_us": int(lat_np.max()) if len(lat_np) else None,
        "buckets": {str(int(x)): int(y) for x, y in zip(b, k, strict=True)},
    }
    letters: list[list[Any]] = []
    if "headers" in t.column_names and n:
        src = pc.map_lookup(t["headers"], pa.scalar(SOURCE), "first")
        why = pc.map_lookup(t["headers"], pa.scalar(REASON), "first")
        letters = [[s, r, k] for s, r, k in _count(src, why)]
    shapes = [[s, k] for s, k in _count(_shapes(t["tuple"]))] if n else []
    return {
        "queue_id": qid,
        "section": section,
        "counts": counts,
        "traffic": [[a, m, p, d] for (a, m), (p, d) in sorted(traffic.items(), key=str)],
        "latency": latency,
        "letters": letters,
        "shapes": shapes,
        "first": pc.min(posted).as_py() if n else None,
        "last": pc.max(posted).as_py() if n else None,
    }


def _shapes(col: Any) -> Any:
    """Each row's tuple shape, ``(string, int)``, from the ``tuple`` column
    read with its ``type`` leaf only."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = col.combine_chunks()
    types = pc.struct_field(arr.flatten(), "type")
    lists = pa.ListArray.from_arrays(arr.offsets, types)
    inner = pc.binary_join(lists, ", ")
    return pc.binary_join_element_wise("(", inner, ")", "")


def _count(*columns: Any) -> list[tuple[Any, ...]]:
    """Each combination of values of ``columns`` (Arrow arrays of one
    length) with how many rows hold it: ``(value, ..., rows)``."""
    import pyarrow as pa

    names = [f"c{i}" for i in range(len(columns))]
    t = pa.table(dict(zip(names, columns, strict=True)))
    if not t.num_rows:
        return []
    g = t.group_by(names, use_threads=False).aggregate([([], "count_all")])
    cols = [g[c].to_pylist() for c in [*names, "count_all"]]
    return list(zip(*cols, strict=True))


def fill(new: str, old: str | None) -> int:
    """Gives every data file of the version ``new`` its aggregates: those
    of the same file in ``old`` (the version before: a hard link of it),
    hard-linked, else computed. Returns how many were computed."""
    computed = 0
    for section in SECTIONS:
        for rel in dataset.files(new, section):
            dst = where(new, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if old is not None and _same(os.path.join(old, rel), os.path.join(new, rel)):
                src = where(old, rel)
                if os.path.exists(src):
                    os.link(src, dst)
                    continue
            with open(dst, "w") as f:
                json.dump(compute(os.path.join(new, rel), section), f, separators=(",", ":"))
            computed += 1
    return computed


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def load(root: str) -> list[tuple[str, dict[str, Any]]]:
    """Every data file's aggregates, with its queue, in the dataset at
    ``root`` (computed here, not kept, for a file without: a dataset an
    older export wrote)."""
    out = []
    for section in SECTIONS:
        for rel in dataset.files(root, section):
            try:
                with open(where(root, rel)) as f:
                    agg = json.load(f)
            except FileNotFoundError:
                agg = compute(os.path.join(root, rel), section)
            out.append((dataset.queue_of(rel), agg))
    return out
