"""The Spark side of msgboard: snapshots as DataFrames, Parquet, reports.

- ``source.py``: the ``msgboard`` data source (``spark.read.format("msgboard")``).
- ``snapfile.py``: a snapshot's LMDB file opened, checked (no Spark).
- ``changes.py``: what changed since the dataset's last night (no Spark).
- ``snapshot.py``: the snapshot's LMDB file: schema, key-range plan, Arrow batches.
- ``session.py``: a SparkSession set up for it (UTC, this interpreter, Java check).
- ``export.py``: snapshot -> a Parquet dataset that accumulates (``dataset.py``: its
  layout, books and atomic swaps).
- ``commands.py``: the ``export``, ``report`` and ``nightly`` commands.
- ``report.py``: Parquet -> history tables, SVG charts (``charts.py``) and an HTML page.

Spark registers this package's ``DefaultSource`` by itself wherever the
package is installed as a regular package (it looks for ``pyspark_*``
modules); ``session.session()`` also registers it explicitly.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DefaultSource", "MsgboardDataSource"]


def __getattr__(name: str) -> Any:
    """``DefaultSource`` (found by Spark's lookup of ``pyspark_*`` packages,
    under its name()) and ``MsgboardDataSource``, imported on first use:
    importing the package, or its modules that need no Spark (``dataset``,
    ``changes``, ``commands``), does not load pyspark."""
    if name in __all__:
        from pyspark_msgboard.source import MsgboardDataSource

        return MsgboardDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
