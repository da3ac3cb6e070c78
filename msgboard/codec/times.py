"""Timestamps and Durations read from a request, checked: the one place
that says which the board accepts.

A protobuf Timestamp is valid when its ``nanos`` is 0 to 999,999,999 and it
falls within years 1 to 9999; a Duration when its ``nanos`` is -999,999,999
to 999,999,999 with the sign of its ``seconds`` (or either sign when
``seconds`` is 0) and it is at most 10,000 years long (the rules of
``google/protobuf/timestamp.proto`` and ``duration.proto``, which protobuf's
own JSON mapping enforces). Anything else is refused, InvalidArgument
naming the field, wherever it is read (``not_before``, ``expires_at``,
``dedup_window``, ``timeout``, ...), rather than normalized silently: a
nanos of 1e9 is a client's bug, not one second more.
"""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from msgboard.errors import InvalidArgument

#: 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, in seconds since the epoch.
MIN_SECONDS = -62_135_596_800
MAX_SECONDS = 253_402_300_799
#: The longest Duration protobuf allows, 10,000 years, in seconds.
MAX_DURATION_SECONDS = 315_576_000_000
_NANOS = 999_999_999


def checked_ts(ts: Timestamp, where: str) -> int:
    """``ts`` in µs since the epoch; InvalidArgument (``where``: the field's
    path) for a Timestamp protobuf calls invalid."""
    s, n = ts.seconds, ts.nanos
    if not 0 <= n <= _NANOS:
        raise InvalidArgument(
            f"{where}: nanos {n} is not a valid Timestamp's (0 to 999,999,999; "
            "a whole second more goes in seconds)",
            field=where,
        )
    if not MIN_SECONDS <= s <= MAX_SECONDS:
        raise InvalidArgument(
            f"{where}: seconds {s} is outside a Timestamp's years 1 to 9999", field=where
        )
    return s * 1_000_000 + n // 1000


def checked_duration(d: Duration, where: str) -> int:
    """``d`` in µs; InvalidArgument (``where``: the field's path) for a
    Duration protobuf calls invalid: nanos out of range or of the other
    sign than seconds, or longer than 10,000 years."""
    s, n = d.seconds, d.nanos
    if not -_NANOS <= n <= _NANOS:
        raise InvalidArgument(
            f"{where}: nanos {n} is not a valid Duration's (-999,999,999 to 999,999,999; "
            "whole seconds go in seconds)",
            field=where,
        )
    if (s > 0 and n < 0) or (s < 0 and n > 0):
        raise InvalidArgument(
            f"{where}: seconds {s} and nanos {n} have mixed signs: not a valid Duration",
            field=where,
        )
    if abs(s) > MAX_DURATION_SECONDS:
        raise InvalidArgument(
            f"{where}: seconds {s} is longer than a Duration's 10,000 years", field=where
        )
    # Toward zero, as a Duration's sign is its seconds' and nanos' alike.
    us = abs(s) * 1_000_000 + abs(n) // 1000
    return -us if s < 0 or n < 0 else us
