"""The framing of a stored message record: a format byte, a checksum, the
payload.

Every value of the ``unprocessed`` and ``history`` sub-databases (schema 3
on) is::

    offset  size  what
    ------  ----  ------------------------------------------------------
    0       1     format: 1 = CRC32C (Castagnoli) as below
    1       4     CRC32C, big-endian, of the record's key (qid u32 +
                  seq u64, 12 bytes) followed by the payload
    5       ...   the payload: msgboard.v1.Message without queue, seq and
                  section (``msgboard.codec.encode_record``)

The checksum covers the key too, so a record that a damaged page shows
under another key (another seq, another queue) fails as surely as a flipped
byte in its body. The framing knows nothing of the payload: a later format
may carry other payload bytes under the same header.

LMDB has no checksums of its own. The store checks a record whenever it
reads one (``unseal``), and so do the Spark reader
(``spark/pyspark_msgboard/snapshot.py``) and ``msgboard check``; all three
import this module, the one place the framing is written down (the rest of
the layout, keys and sub-databases, is in ``layout.py``).

CRC32C is computed by ``google-crc32c`` (Google's C library, with the CPU's
CRC32 instruction): about 0.15 µs for a 100-byte record and 0.2 µs for
1 KiB, against 0.24 and 0.5 µs for the standard library's ``zlib.crc32``.
"""

from __future__ import annotations

import struct

import google_crc32c

#: The format byte of the framing written here.
FORMAT = 1
#: Bytes before the payload.
HEADER = 5

_HEAD = struct.Struct(">BI")
_extend = google_crc32c.extend
_value = google_crc32c.value


class Damaged(ValueError):
    """A record failed its check; the message says how."""


def crc(key: bytes, payload: bytes) -> int:
    """The checksum of ``payload`` stored under ``key``."""
    value: int = _extend(_value(key), payload)
    return value


def seal(key: bytes, payload: bytes) -> bytes:
    """The record to store under ``key`` for ``payload``."""
    return _HEAD.pack(FORMAT, _extend(_value(key), payload)) + payload


def unseal(key: bytes, data: bytes) -> bytes:
    """The payload of the record ``data`` stored under ``key``; Damaged if
    it is too short, of a format this version does not know, or fails its
    checksum."""
    if len(data) < HEADER:
        raise Damaged(f"{len(data)} bytes, shorter than the {HEADER}-byte header")
    fmt, stored = _HEAD.unpack_from(data)
    if fmt != FORMAT:
        raise Damaged(f"unknown record format {fmt}")
    payload = data[HEADER:]
    if _extend(_value(key), payload) != stored:
        raise Damaged("checksum mismatch")
    return payload


def append(data: bytes, suffix: bytes) -> bytes:
    """The record ``data`` (already checked, or read since) with ``suffix``
    appended to its payload, its checksum extended over it without reading
    the payload again."""
    stored = _HEAD.unpack_from(data)[1]
    return _HEAD.pack(FORMAT, _extend(stored, suffix)) + data[HEADER:] + suffix
