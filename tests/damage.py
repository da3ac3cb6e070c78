"""Boards damaged on purpose, and boards of older schemas, for the tests of
checksums, upgrades and ``msgboard check``. Each helper works on a closed
data directory, through LMDB directly or on the bytes of ``data.mdb``."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import lmdb

from msgboard.lmdbstore import record

_KEY = struct.Struct(">IQ")


def _env(path: Path) -> lmdb.Environment:
    return lmdb.open(str(path), max_dbs=16, map_size=1 << 34)


def downgrade(path: Path, schema: bytes) -> None:
    """Makes a schema-4 board one of ``schema`` (b"3": no key or schedule sub-databases;
    b"2": every record without its framing, as that schema stored it; or
    b"1": no index either). The board must hold no idempotency keys."""
    env = _env(path)
    try:
        with env.begin(write=True) as txn:
            for name in (b"keys", b"keyends", b"scheduled", b"due"):
                txn.drop(env.open_db(name, txn=txn), delete=True)
            for name in (b"unprocessed", b"history"):
                if schema == b"3":
                    break
                cur = txn.cursor(env.open_db(name, txn=txn))
                for k, v in list(cur):
                    cur.put(k, record.unseal(k, v))
            if schema == b"1":
                txn.drop(env.open_db(b"index", txn=txn, dupsort=True), delete=True)
            txn.put(b"schema", schema, db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


def put(path: Path, db: bytes, key: bytes, value: bytes | None, dup: bytes = b"") -> None:
    """Writes (or, with None, deletes) one entry of a sub-database; for the
    dupsort ``index``, deletes the duplicate ``dup`` only."""
    env = _env(path)
    try:
        with env.begin(write=True) as txn:
            d = env.open_db(db, txn=txn, dupsort=db == b"index")
            if value is None:
                assert txn.delete(key, dup or None, db=d) if dup else txn.delete(key, db=d)
            else:
                txn.put(key, value, db=d)
    finally:
        env.close()


def swap(path: Path, db: bytes, key: bytes, value: bytes | None) -> bytes | None:
    """Puts (or, with None, deletes) one entry of a sub-database that is
    not dupsort; returns what it held (None: nothing), to put it back."""
    env = _env(path)
    try:
        with env.begin(write=True) as txn:
            d = env.open_db(db, txn=txn)
            old = txn.get(key, db=d)
            if value is None:
                txn.delete(key, db=d)
            else:
                txn.put(key, value, db=d)
            return None if old is None else bytes(old)
    finally:
        env.close()


def caught_alone(path: Path, cases: list[tuple[bytes, bytes, bytes | None, str]]) -> None:
    """For each (sub-database, key, value or None, problem): swaps that one
    entry in, expects ``msgboard check`` to report the problem, puts the
    entry back and expects the board clean again."""
    from msgboard.lmdbstore.check import check

    for db, key, value, problem in cases:
        saved = swap(path, db, key, value)
        text = "\n".join(check(path).lines())
        assert problem in text, text
        swap(path, db, key, saved)
        assert check(path).ok


def get(path: Path, db: bytes, key: bytes) -> bytes:
    env = _env(path)
    try:
        with env.begin() as txn:
            value = txn.get(key, db=env.open_db(db, txn=txn, create=False))
            assert value is not None
            return bytes(value)
    finally:
        env.close()


def key(qid: int, seq: int) -> bytes:
    return _KEY.pack(qid, seq)


def flip(path: Path, marker: bytes, offset: int = 0) -> int:
    """Flips one bit of ``data.mdb`` where ``marker`` begins, plus
    ``offset``, at every place it is found (LMDB's copy-on-write may have
    left older copies in free pages): a byte gone bad on the disk. Returns
    how many places."""
    data = path / "data.mdb"
    raw = bytearray(data.read_bytes())
    places = 0
    at = raw.find(marker)
    while at >= 0:
        raw[at + offset] ^= 0x01
        places += 1
        at = raw.find(marker, at + 1)
    assert places, "the marker must be there"
    data.write_bytes(bytes(raw))
    return places


def truncate(path: Path, size: int) -> None:
    os.truncate(path / "data.mdb", size)
