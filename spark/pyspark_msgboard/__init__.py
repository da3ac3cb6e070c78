"""The Spark side of msgboard: snapshots as DataFrames, Parquet, reports.

- ``source.py``: the ``msgboard`` data source (``spark.read.format("msgboard")``).
- ``snapshot.py``: the snapshot's LMDB file: schema, key-range plan, Arrow batches.
- ``session.py``: a SparkSession set up for it (UTC, this interpreter, Java check).
- ``export.py``: snapshot -> a Parquet dataset that accumulates (``dataset.py``: its
  layout, books and atomic swaps).
- ``commands.py``: the ``export``, ``report`` and ``nightly`` commands.
- ``report.py``: Parquet -> history tables, PNG charts and an HTML page.

Spark registers this package's ``DefaultSource`` by itself wherever the
package is installed as a regular package (it looks for ``pyspark_*``
modules); ``session.session()`` also registers it explicitly.
"""

from __future__ import annotations

from pyspark_msgboard.source import MsgboardDataSource

#: Found by Spark's lookup of ``pyspark_*`` packages, under its name().
DefaultSource = MsgboardDataSource

__all__ = ["DefaultSource", "MsgboardDataSource"]
