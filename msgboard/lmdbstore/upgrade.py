"""Schema upgrades of a board's LMDB environment, run when it is opened.

The schema history (``meta/schema``; the layout is in ``layout.py``):

- ``1``: the records.
- ``2``: ``index`` files every unprocessed message under its keys
  (``msgboard.associative.keys``).
- ``3``: every record is framed with a CRC32C of its key and payload
  (``record.py``).
- ``4``: ``keys`` and ``keyends`` hold idempotency keys; an older board has
  none, so the upgrade only creates them (empty), as opening does.

``run`` brings an older environment to the current schema in the caller's
write transaction (once, all or nothing) and logs one line with what it did:
the one time opening a board reads its messages.
"""

from __future__ import annotations

import json
import logging
import time

import lmdb

from msgboard.associative.keys import message_keys
from msgboard.codec import decode_record
from msgboard.lmdbstore import record
from msgboard.lmdbstore.layout import INDEXED, KEY, Dbs, is_sealed
from msgboard.message import Section

log = logging.getLogger(__name__)


def run(txn: lmdb.Transaction[bytes], dbs: Dbs, schema: bytes, to: bytes, path: str) -> None:
    """Upgrades from ``schema`` to ``to`` (``layout.SCHEMA``), in ``txn``,
    the write transaction ``dbs`` were opened in."""
    t0 = time.monotonic()
    indexed = _index(txn, dbs) if int(schema) < int(INDEXED) else 0
    sealed = 0 if is_sealed(schema) else _seal(txn, dbs)
    txn.put(b"schema", to, db=dbs.meta)
    log.warning(
        "%s: upgraded schema %s to %s: indexed %d unprocessed messages, "
        "sealed %d records with their checksums, in %.1f s",
        path,
        schema.decode(),
        to.decode(),
        indexed,
        sealed,
        time.monotonic() - t0,
    )


def _index(txn: lmdb.Transaction[bytes], dbs: Dbs) -> int:
    """Schema 1 to 2: files every unprocessed message in ``index``."""
    qids = {}
    with txn.cursor(db=dbs.queues) as cur:
        for key, value in cur:
            qids[json.loads(value)["id"]] = key.decode()
    n = 0
    put, index = txn.put, dbs.index
    with txn.cursor(db=dbs.unprocessed) as cur:
        for k, v in cur:
            qid, seq = KEY.unpack(k)
            m = decode_record(v, qids.get(qid, ""), seq, Section.UNPROCESSED)
            for key in message_keys(m.address, m.tuple):
                put(k[:4] + key, k[4:], db=index)
            n += 1
    return n


def _seal(txn: lmdb.Transaction[bytes], dbs: Dbs) -> int:
    """Schema 2 to 3: frames every record with its checksum."""
    n = 0
    for db in (dbs.unprocessed, dbs.history):
        with txn.cursor(db=db) as cur:
            more = cur.first()
            while more:
                k, v = cur.item()
                cur.put(k, record.seal(k, v))
                n += 1
                more = cur.next()
    return n
