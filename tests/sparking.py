"""Helpers of the Spark tests (``test_spark.py``, ``test_spark_nights.py``);
their SparkSession is the ``spark`` fixture of ``conftest.py``."""

from __future__ import annotations

from msgboard import Message
from msgboard.engine import Board


def post(b: Board, queue: str, msgs: list[Message]) -> None:
    """Posts ``msgs`` to ``queue`` in calls of 1,000."""
    for i in range(0, len(msgs), 1000):
        b.post(queue, msgs[i : i + 1000])
