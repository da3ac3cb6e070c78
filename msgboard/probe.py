"""Timestamps of the core path, for ``bench/latency_budget.py``.

Off unless the environment variable ``MSGBOARD_PROBE`` names a file when
the process starts (read once, at import). When off, each probe point is
one test of a module constant (``if probe.ON:``) and nothing more. When on,
each point appends ``(stage, perf_counter_ns, count)`` to a list in memory
(``list.append`` holds the GIL: any thread may call ``mark``), and the list
is written to the file, one JSON array a line, when the process exits
cleanly (SIGTERM: ``msgboard serve`` stops cleanly on it).

``perf_counter_ns`` is CLOCK_MONOTONIC on Linux, the same clock in every
process of the machine, so the bench script lines a client's stamps up with
the server's. The stages are named in ``bench/latency_budget.py``.
"""

from __future__ import annotations

import atexit
import json
import os
import time

PATH = os.environ.get("MSGBOARD_PROBE", "")
ON = bool(PATH)

_marks: list[tuple[str, int, int]] = []


def mark(stage: str, count: int = 1) -> None:
    """Notes that ``count`` operations passed ``stage`` now."""
    _marks.append((stage, time.perf_counter_ns(), count))


def dump() -> None:
    """Writes what was noted to ``PATH`` (appending) and forgets it."""
    marks, _marks[:] = list(_marks), []
    with open(PATH, "a", encoding="utf-8") as f:
        for m in marks:
            f.write(json.dumps(m) + "\n")


if ON:
    atexit.register(dump)
