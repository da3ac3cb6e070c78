"""The LMDB layout of a board, written down once: the table below, and the
code that declares it (key structs, schema versions, the sub-databases and
their flags, reading a record, a selector's value, walking a queue's keys).
The store
(``durable.py``, ``txn.py``), ``msgboard check`` (``check.py``), the schema
upgrades (``upgrade.py``), snapshots (``snapshot.py``) and the Spark reader
(``spark/pyspark_msgboard/snapshot.py``, which decodes these files directly)
all import it; change the layout here, together with ``SCHEMA``.

One environment (a directory), fourteen named sub-databases. Integers are
big-endian, so keys sort by queue, then seq::

    sub-database  key                            value
    ------------  -----------------------------  -----------------------------
    meta          b"schema"                      b"4"
                  b"next_qid"                    u64: the next queue id
                  b"next_sid"                    u64: the next selector number
    queues        queue name, UTF-8              JSON {"id": qid,
                                                   "spec": QueueSpec.to_json(),
                                                   "created_at": µs}
    state         qid u32                        ">QQQ": next_seq, unprocessed
                                                   count, history count
                  qid u32 + b"s"                 u64: scheduled count (if any)
    unprocessed   qid u32 + seq u64 (12 bytes)   record.seal(key, payload), the
                                                   payload encode_record(msg)
    history       qid u32 + seq u64 (12 bytes)   the same
    times         qid u32 + second u64           seq u64
    selectors     selector id, UTF-8             msgboard.v1.SelectorSpec
    index         qid u32 + index key            seq u64, sorted duplicates
                  (dupsort)                        (one per message filed)
    keys          qid u32 + idempotency key      ">QQ": seq, until (µs; 0 while
                  (UTF-8, 1-256 bytes)             the message is on the board)
    keyends       until u64 + qid u32 + key      b"" (one per key whose
                                                   message has left)
    scheduled     qid u32 + seq u64 (12 bytes)   a record, as unprocessed
    due           not_before u64 + qid u32 +     b"" (one per scheduled
                  seq u64 (20 bytes)               message)
    oplog         index u64                      an entry of the operation log
                                                   (``oplog.py``): one per
                                                   logged group commit
    meta          b"board_id"                    ASCII: the id links key with,
                                                   shared by every board holding
                                                   this data (logged)
                  b"log_last"                    ">QQ": index, epoch of the
                                                   last entry (once logged)
                  b"log_first"                   u64: the oldest index kept
    links         link name, UTF-8               msgboard.v1.LinkSpec (its
                                                   token and key included)

A record is a format byte and a CRC32C of its key and payload
(``record.py``), then the payload: a ``msgboard.v1.Message`` without queue,
seq and section (its key and sub-database say them). Every read checks it:
a damaged record is RecordDamaged (DATA_LOSS) where one record was asked
for (``fetch``), and is skipped, logged once and counted (``damaged``)
where records are walked (``scan``, ``find``, ``seq_at``), so the rest of
the queue stays usable. The other sub-databases carry no checksum: they are
read at open (``queues``, ``state``, ``selectors``) or cross-checked by
``msgboard check`` (``index``, ``times``, the counters).

``times`` is a sparse index: one entry per second in which the queue's
posted second changed, holding the first seq posted in that second. As
``posted_at`` never goes backwards within a queue, every seq from one entry
up to the next was posted in that entry's second; this is what makes
``seq_at`` a few cursor reads. Queue ids are never reused; deleting a
queue removes all its keys.

``index`` files each *unprocessed* message under the keys of
``msgboard.associative.keys`` (its address ``a…``, its shape ``s…``, each
field ``f…``), written and deleted in the transaction that appends,
processes or restores it; ``find`` (``search.py``) reads it. A key's
duplicates are big-endian seqs, so they come back in seq order, and
LMDB counts them without reading them.

``keys`` holds each message's idempotency key (``Message.key``) while the
message is on its queue (waiting or in history), with until 0, written in
the transaction that appends it; when the message leaves the queue (taken
with no history kept, trimmed from history, moved or dead-lettered away)
its entry gets ``until``, the time its queue's ``dedup_window`` ends (or
goes at once, with a window of 0), and ``keyends`` files it under that
time, so that the sweep that drops ended keys reads only those. A queue
holds one message per key: the engine answers a post of a held key with
the holder's seq (DUPLICATE) and stores nothing.

``scheduled`` holds the messages posted with a ``not_before`` still to
come, under the seq they got when posted: invisible to takes, reads and
selectors, which read ``unprocessed``. ``due`` files each under its time,
so that releasing what is due reads from its start, and nothing at all
when nothing is due (also after a restart). Releasing moves the record,
bytes unchanged (its checksum covers the same key), to ``unprocessed``.

``oplog`` is the operation log of a replicated board (``oplog.py``): each
group commit of a board with its log on records the puts and deletes its
transaction made on the other sub-databases as one entry, under the next
index, in the same transaction; a standby applies the entry's operations
and stores the same entry, so the two hold the same bytes. ``oplog`` and
the ``log_*`` keys of ``meta`` are never themselves logged. A board
without its log writes nothing there; opened so with a log left from
before, it drops the entries and leaves a hole at the next index
(``log_first`` past ``log_last``), so that no standby continues across
writes the log does not hold.

``meta/board_id`` is the id the links key what they forward with and a
board reports as its own (``Board.board_id``, StatsResponse.board_id):
written once, in an ordinary (logged) transaction when a board first opens
its data as a primary or alone, with the directory's ``board-id`` as its
value, so a standby gets it through the log or with its seed, and every
board of a cluster keys alike. The directory's ``board-id`` file stays the
board's own: the replication names a standby by it.

``links`` holds the board's links to other boards (``msgboard.links``):
one ``LinkSpec`` per name, read when the board opens, written and deleted
by CreateLink and DeleteLink. A crossing selector (``destination_link``)
keeps its spec in ``selectors`` as any other, and its outbox is an
ordinary queue of ``queues`` named ``$link.`` and the selector id.

Schemas. ``2`` added ``index``; ``3`` framed every record with its
checksum; ``4`` added ``keys``, ``keyends``, ``scheduled`` and ``due``, and
later ``oplog`` and ``links``, which opening creates empty in any schema-4
directory (a board that never logs or links leaves them empty: no schema
change). An older directory is
upgraded when it is opened (``upgrade.py``), once, in one transaction,
with a log line (the one time opening reads messages): from schema 1 the
index is built from the unprocessed records; from 1 or 2 every record is
sealed; to 4 the four (empty) new sub-databases are created, as opening
does. A directory of any other schema is
refused with StoreError.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import lmdb

from msgboard.codec import (
    decode_record,
    link_spec_from_pb,
    link_spec_to_pb,
    selector_spec_from_pb,
    selector_spec_to_pb,
)
from msgboard.errors import DataFileDamaged, RecordDamaged
from msgboard.lmdbstore import record
from msgboard.message import Message, Section
from msgboard.spec import LinkSpec, SelectorSpec
from msgboard.v1 import board_pb2 as pb

#: The schema this version writes (``meta/schema``).
SCHEMA = b"4"
#: Every schema this version reads; an older one is upgraded when a board
#: opens it, and read as it is by ``msgboard check`` and the Spark reader.
SCHEMAS = (b"1", b"2", b"3", b"4")
#: The first schema with ``index``, and the first whose records are sealed.
INDEXED = b"2"
SEALED = b"3"
#: The first schema with ``keys``, ``keyends``, ``scheduled`` and ``due``.
KEYED = b"4"


def is_sealed(schema: bytes) -> bool:
    """Whether records of ``schema`` (a known one) carry their checksums."""
    return int(schema) >= int(SEALED)


#: A queue id: the ``state`` key, and the first 4 bytes of every other key
#: of a queue (its prefix).
QID = struct.Struct(">I")
#: A seq, a selector number or a count: the values of ``times``, ``index``
#: and ``meta``'s counters, and the second half of a key.
U64 = struct.Struct(">Q")
#: A record's key (qid, seq), and a ``times`` key (qid, second).
KEY = struct.Struct(">IQ")
#: A ``state`` value: next_seq, unprocessed count, history count.
STATE = struct.Struct(">QQQ")
#: A ``keys`` value: the seq holding the key, and when the key ends (0: not
#: while the message is on the board).
HOLD = struct.Struct(">QQ")
#: A ``due`` key: not_before, then the record's key (qid, seq).
DUE = struct.Struct(">QIQ")
#: Appended to a queue id: the ``state`` key of its scheduled count.
SCHEDULED = b"s"
#: Sorts after every seq of a queue: ``prefix + LAST``.
LAST = b"\xff" * 8
MAX_U64 = 2**64 - 1

#: The board's own queue where ``msgboard check --repair`` sets damaged
#: records aside (users may read it, as ``$sys``).
DAMAGED = "$damaged"

#: The named sub-databases, in the order of the table above.
NAMES = (
    "meta",
    "queues",
    "state",
    "unprocessed",
    "history",
    "times",
    "selectors",
    "index",
    "keys",
    "keyends",
    "scheduled",
    "due",
    "oplog",
    "links",
)
#: The log's own keys in ``meta`` (never logged): the last entry's index and
#: epoch (``LOG_LAST``), and the oldest index kept (``U64``).
LOG_LAST_KEY = b"log_last"
#: The id the links key with (``meta``), shared by a cluster's boards.
BOARD_ID_KEY = b"board_id"
LOG_FIRST_KEY = b"log_first"
LOG_LAST = struct.Struct(">QQ")
#: Room for named sub-databases when an environment is opened (fourteen used).
MAX_DBS = 16


def dupsort(name: str) -> bool:
    """Whether the sub-database keeps sorted duplicates (``index``)."""
    return name == "index"


class Dbs:
    """An opened environment (``path``, its page size ``psize``) and its
    fourteen sub-databases, by the names of the table above. A DurableStore
    opens them once and hands them to each of its transactions."""

    __slots__ = (
        "due",
        "env",
        "history",
        "index",
        "keyends",
        "keys",
        "links",
        "meta",
        "oplog",
        "path",
        "psize",
        "queues",
        "scheduled",
        "selectors",
        "state",
        "times",
        "unprocessed",
    )

    def __init__(
        self, env: lmdb.Environment, txn: lmdb.Transaction[bytes], path: str, psize: int
    ) -> None:
        """Opens (creating what is missing) every sub-database in ``txn``,
        a write transaction."""
        self.env, self.path, self.psize = env, path, psize

        def db(name: str) -> Any:
            # Not dupfixed: LMDB 0.9.36's compacting copy (a snapshot)
            # crashes on a dupfixed database.
            return env.open_db(name.encode(), txn=txn, dupsort=dupsort(name))

        self.meta = db("meta")
        self.queues = db("queues")
        self.state = db("state")
        self.unprocessed = db("unprocessed")
        self.history = db("history")
        self.times = db("times")
        self.selectors = db("selectors")
        self.index = db("index")
        self.keys = db("keys")
        self.keyends = db("keyends")
        self.scheduled = db("scheduled")
        self.due = db("due")
        self.oplog = db("oplog")
        self.links = db("links")

    def pages(self, txn: lmdb.Transaction[bytes]) -> int:
        """The pages the environment's data uses: its meta pages, the main
        database and every sub-database, as ``txn`` sees them."""
        used = 2  # the meta pages
        for st in (self.env.stat(), *(txn.stat(getattr(self, name)) for name in NAMES)):
            used += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        return used


def key_end(until: int, prefix: bytes, key: bytes) -> bytes:
    """A ``keyends`` key: when the key ends, then its ``keys`` key."""
    return U64.pack(until) + prefix + key


def decode(key: bytes, raw: bytes, name: str, seq: int, section: Section) -> Message:
    """The message stored as ``raw`` under ``key`` (a sealed record);
    RecordDamaged if it fails its check."""
    try:
        return decode_record(record.unseal(key, raw), name, seq, section)
    except record.Damaged as e:
        raise RecordDamaged(name, seq, str(e)) from None
    except Exception as e:  # a payload that passed its checksum but does not parse
        raise RecordDamaged(name, seq, f"undecodable: {e}") from None


def placed(e: RecordDamaged, seq: int, prev: int, next_seq: int, forward: bool) -> RecordDamaged:
    """``e``, or (its key's seq not to be trusted: not below the queue's
    next seq, or in a forward walk not past ``prev``, the last good seq)
    the same damage named by its place, after ``prev``."""
    if seq < next_seq and (not forward or seq > prev):
        return e
    return RecordDamaged(e.queue, 0, e.why, after=prev)


def intact(key: bytes, raw: bytes) -> bool:
    """Whether the record ``raw`` under ``key`` passes its check."""
    try:
        decode(key, raw, "", 0, Section.UNPROCESSED)
    except RecordDamaged:
        return False
    return True


def encode_selector(spec: SelectorSpec) -> bytes:
    """A ``selectors`` value: the spec as a ``msgboard.v1.SelectorSpec``."""
    return selector_spec_to_pb(spec).SerializeToString()


def decode_selector(raw: bytes) -> SelectorSpec:
    """The spec stored as ``raw``, written by this version or an older one
    (which kept a selector to a queue's quota in ``credit``). Raises
    protobuf's DecodeError or InvalidArgument if it does not parse."""
    return selector_spec_from_pb(pb.SelectorSpec.FromString(raw), stored=True)


def load_selector(path: str, sid: str, raw: bytes) -> SelectorSpec:
    """``decode_selector`` for the store: the spec of selector ``sid`` of
    the board at ``path``, or DataFileDamaged if it does not parse."""
    try:
        return decode_selector(raw)
    except Exception as e:  # DecodeError, InvalidArgument: damaged on disk
        raise DataFileDamaged(
            f"{path}: selector {sid}: its stored spec does not parse ({e}); "
            f"msgboard check {path} tells more"
        ) from None


def encode_link(spec: LinkSpec) -> bytes:
    """A ``links`` value: the spec as a ``msgboard.v1.LinkSpec``."""
    return link_spec_to_pb(spec).SerializeToString()


def load_link(path: str, name: str, raw: bytes) -> LinkSpec:
    """The spec of link ``name`` stored as ``raw``, or DataFileDamaged if
    it does not parse."""
    try:
        return link_spec_from_pb(pb.LinkSpec.FromString(raw))
    except Exception as e:  # DecodeError: damaged on disk
        raise DataFileDamaged(
            f"{path}: link {name}: its stored spec does not parse ({e}); "
            f"msgboard check {path} tells more"
        ) from None


def seek_last(cur: lmdb.Cursor[bytes], key: bytes) -> bool:
    """Positions ``cur`` on the last key <= ``key``; False if there is none."""
    if cur.set_range(key):
        return cur.key() == key or cur.prev()
    return cur.last()


def walk(
    cur: lmdb.Cursor[bytes], prefix: bytes, key: bytes, reverse: bool
) -> Iterator[tuple[bytes, bytes]]:
    """Yields the items from ``key`` on (down, if ``reverse``) while their keys
    start with ``prefix`` (a queue's 4 bytes). A key of another queue between
    two of this one is damage (a bit of its queue id gone bad): it is
    yielded too, for its record to fail its check, and the walk goes on."""
    if not (seek_last(cur, key) if reverse else cur.set_range(key)):
        return
    step = cur.prev if reverse else cur.next
    k, v = cur.item()
    while True:
        if k[:4] != prefix:
            if not step() or cur.key()[:4] != prefix:
                return
            yield k, v
            k, v = cur.item()
        yield k, v
        if not step():
            return
        k, v = cur.item()
