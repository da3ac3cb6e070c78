"""Comparing two boards' data, record by record: a replicated board's
standby must hold exactly its primary's keys and values.

``differences(a, b)`` opens both directories read-only (a running board's
too: LMDB readers do not stop its writer) and walks every sub-database of
``layout.NAMES`` in key order, side by side, naming each key that only one
of them has and each key whose values differ. The log (``oplog`` and the
``log_*`` keys of ``meta``) is left out unless asked for: a standby keeps
its own retention of it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import lmdb

from msgboard.lmdbstore.layout import LOG_FIRST_KEY, LOG_LAST_KEY, MAX_DBS, NAMES, dupsort

#: What a comparison leaves out by default: the log and its keys.
LOG_ONLY = ("oplog",)


def differences(
    a: str | os.PathLike[str], b: str | os.PathLike[str], *, log: bool = False, most: int = 50
) -> list[str]:
    """What differs between the boards at ``a`` and ``b`` (at most
    ``most`` lines; [] when they hold the same). ``log``: compare the log
    too."""
    out: list[str] = []
    with _opened(a) as (ea, da), _opened(b) as (eb, db), ea.begin() as ta, eb.begin() as tb:
        for name in NAMES:
            if name in LOG_ONLY and not log:
                continue
            rows_a = _rows(ta, da.get(name), name, log)
            rows_b = _rows(tb, db.get(name), name, log)
            for line in _diff(name, rows_a, rows_b):
                out.append(line)
                if len(out) >= most:
                    return out
    return out


class _opened:
    """An environment opened read-only, and its sub-databases by name."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.env = lmdb.open(os.fspath(path), readonly=True, max_dbs=MAX_DBS, subdir=True)
        self.dbs: dict[str, object] = {}
        for name in NAMES:
            with contextlib.suppress(lmdb.NotFoundError):  # an older schema's
                self.dbs[name] = self.env.open_db(
                    name.encode(), create=False, dupsort=dupsort(name)
                )

    def __enter__(self) -> tuple[lmdb.Environment, dict[str, object]]:
        return self.env, self.dbs

    def __exit__(self, *exc: object) -> None:
        self.env.close()


def _rows(
    txn: lmdb.Transaction[bytes], db: object, name: str, log: bool
) -> Iterator[tuple[bytes, bytes]]:
    if db is None:
        return
    skip = () if log or name != "meta" else (LOG_FIRST_KEY, LOG_LAST_KEY)
    for k, v in txn.cursor(db=db):  # type: ignore[arg-type]
        if k not in skip:
            yield k, v


def _diff(
    name: str, a: Iterator[tuple[bytes, bytes]], b: Iterator[tuple[bytes, bytes]]
) -> Iterator[str]:
    """Merges two walks sorted by (key, value); a line per difference."""
    dup = dupsort(name)
    x, y = next(a, None), next(b, None)
    while x is not None or y is not None:
        if x is not None and y is not None and (x == y or (x[0] == y[0] and not dup)):
            if x != y:
                yield f"{name}: key {x[0].hex()} differs: {x[1][:32].hex()} vs {y[1][:32].hex()}"
            x, y = next(a, None), next(b, None)
        elif y is None or (x is not None and x < y):
            assert x is not None
            yield f"{name}: key {x[0].hex()} only in the first"
            x = next(a, None)
        else:
            yield f"{name}: key {y[0].hex()} only in the second"
            y = next(b, None)
