"""Helpers of the Spark tests (``test_spark.py``, ``test_spark_nights.py``);
their SparkSession is the ``spark`` fixture of ``conftest.py``."""

from __future__ import annotations

import struct
from typing import Any

from msgboard import Message
from msgboard.engine import Board


def post(b: Board, queue: str, msgs: list[Message]) -> None:
    """Posts ``msgs`` to ``queue`` in calls of 1,000."""
    for i in range(0, len(msgs), 1000):
        b.post(queue, msgs[i : i + 1000])


def exact(v: Any) -> Any:
    """Floats by their bits, so that NaN equals NaN and -0.0 is not 0.0."""
    if isinstance(v, float):
        return struct.pack("<d", v)
    if isinstance(v, dict):
        return {k: exact(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [exact(x) for x in v]
    return v
