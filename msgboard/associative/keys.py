"""Index keys: what a message is filed under, and what a pattern looks up.

The stores keep an inverted index of each queue's unprocessed messages
(``msgboard.lmdbstore.search`` reads it). A message is filed under three
kinds of key, each a short byte string that sorts well in LMDB:

- its **address**: ``b"a" + UTF-8``;
- its **shape**, the arity and the type of each field:
  ``b"s" + arity + one type tag per field``;
- each **field**, by arity, position and typed value:
  ``b"f" + arity + position + type tag + value``.

A value is its type tag (null 0, bool 1, int 2, float 3, str 4, bytes 5)
and its bytes: int and float big-endian (-0.0 as 0.0, every NaN as one
NaN), str as UTF-8. Long values are filed under a digest (tag | 0x80, then
16 bytes of BLAKE2b), and an address over ``ADDRESS_KEY_BYTES`` under its
first bytes, ``0xff`` and a digest, so every key fits LMDB's 511-byte limit.
A digest can collide; that only adds a candidate, and every candidate is
checked against the whole pattern.

A pattern turns into ``Lookup``\\ s: one exact key, or a key range (a key
prefix) whose keys are filtered by a test on the key itself before any
message is read. An ``eq`` address is one key; a topic or prefix address
with a literal start is the range of addresses starting with it, each key
tested with the topic; an actual field is one key; a template's shape is
one key when every position fixes a type, otherwise the range of shapes of
its arity that fit.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from hashlib import blake2b

from msgboard.associative.address import AddressPattern
from msgboard.associative.template import Actual, AnyField, Formal, Prefix, Range, Template
from msgboard.associative.tuples import ValueType
from msgboard.message import Fields, Value

__all__ = [
    "ADDRESS_KEY_BYTES",
    "Lookup",
    "address_key",
    "address_lookup",
    "field_key",
    "message_keys",
    "shape_key",
    "template_lookups",
    "topic_words",
    "value_key",
]

#: Addresses longer than this (UTF-8) are filed under their start and a digest.
ADDRESS_KEY_BYTES = 256
#: str and bytes values longer than this are filed under a digest.
VALUE_KEY_BYTES = 128
_DIGESTED = 0x80

ADDRESS, SHAPE, FIELD = b"a", b"s", b"f"

#: The type tag of each field type.
TAGS: dict[ValueType, int] = {
    ValueType.NULL: 0,
    ValueType.BOOL: 1,
    ValueType.INT: 2,
    ValueType.FLOAT: 3,
    ValueType.STRING: 4,
    ValueType.BYTES: 5,
}
_TAG_OF: dict[type, int] = {vt.pytype: tag for vt, tag in TAGS.items()}
_ALL_TAGS = frozenset(TAGS.values())
_NUMBER_TAGS = frozenset((TAGS[ValueType.INT], TAGS[ValueType.FLOAT]))
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_NAN = _F64.pack(float("nan"))


def _digest(b: bytes) -> bytes:
    return blake2b(b, digest_size=16).digest()


def value_key(v: Value) -> bytes:
    """A field value's key: type tag and bytes (a digest if long)."""
    t = type(v)
    if t is str:
        tag, b = 4, v.encode("utf-8", "surrogatepass")  # type: ignore[union-attr]
    elif t is int:
        tag, b = 2, _I64.pack(v)
    elif t is float:
        tag, b = 3, _NAN if v != v else _F64.pack(v + 0.0)  # type: ignore[operator]
    elif t is bytes:
        tag, b = 5, v
    elif t is bool:
        tag, b = 1, b"\x01" if v else b"\x00"
    else:
        tag, b = 0, b""
    if len(b) > VALUE_KEY_BYTES:
        return bytes((tag | _DIGESTED,)) + _digest(b)
    return bytes((tag,)) + b


def address_key(address: str) -> bytes:
    """An address's key: ``b"a"`` + UTF-8, or its start, 0xff and a digest."""
    b = address.encode("utf-8", "surrogatepass")
    if len(b) > ADDRESS_KEY_BYTES:
        return ADDRESS + b[:ADDRESS_KEY_BYTES] + b"\xff" + _digest(b)
    return ADDRESS + b


def _address_of(key: bytes) -> str | None:
    """The address an address key files, None if it was cut (UTF-8 has no 0xff)."""
    b = key[1:]
    return None if b"\xff" in b else b.decode("utf-8", "surrogatepass")


def shape_key(fields: Fields) -> bytes:
    """A tuple's shape key: arity, then the type tag of each field."""
    return SHAPE + bytes((len(fields), *[_TAG_OF[type(v)] for v in fields]))


def field_key(arity: int, position: int, v: Value) -> bytes:
    """The key of one field of a tuple of ``arity`` fields."""
    return FIELD + bytes((arity, position)) + value_key(v)


def message_keys(address: str, fields: Fields) -> list[bytes]:
    """Every key a message with this address and tuple is filed under."""
    n = len(fields)
    keys = [address_key(address), shape_key(fields)]
    keys += [FIELD + bytes((n, i)) + value_key(v) for i, v in enumerate(fields)]
    return keys


# -- lookups ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lookup:
    """One exact key (``accept`` None), or the keys starting with ``key`` for
    which ``accept(key)`` is true."""

    key: bytes
    accept: Callable[[bytes], bool] | None = None

    @property
    def exact(self) -> bool:
        return self.accept is None


def topic_words(text: str) -> list[str]:
    """A topic pattern's words, with runs of ``#`` collapsed (``#.#`` = ``#``)."""
    words: list[str] = []
    for w in text.split(".") if text else []:
        if not (w == "#" and words and words[-1] == "#"):
            words.append(w)
    return words


def address_lookup(a: AddressPattern) -> Lookup | None:
    """The lookup for an address pattern; None if it matches every address."""
    if a.matches_all:
        return None
    if a.kind == "eq":
        return Lookup(address_key(a.text))
    if a.kind == "prefix":
        start = a.text
    else:
        words = topic_words(a.text)
        wild = [i for i, w in enumerate(words) if w in ("*", "#")]
        if not wild:
            return Lookup(address_key(a.text))
        k = wild[0]
        start = ".".join(words[:k])
        if k and words[k] == "*":
            start += "."  # "a.*" needs "a." and a word; "a.#" matches "a" too
    prefix = address_key(start)
    if len(prefix) > 1 + ADDRESS_KEY_BYTES:
        prefix = prefix[: 1 + ADDRESS_KEY_BYTES]  # keys of long addresses are cut there

    def accept(key: bytes) -> bool:
        address = _address_of(key)
        return address is None or a.matches(address)

    return Lookup(prefix, accept)


def _tags(f: object) -> frozenset[int]:
    """The type tags of the values a field pattern can match."""
    if isinstance(f, Actual):
        return frozenset((_TAG_OF[type(f.value)],))
    if isinstance(f, Formal):
        return frozenset((TAGS[f.type],))
    if isinstance(f, Range):
        return _NUMBER_TAGS if type(f.lo) is not str else frozenset((4,))
    if isinstance(f, Prefix):
        return frozenset((4 if type(f.p) is str else 5,))
    assert isinstance(f, AnyField)
    return _ALL_TAGS


def template_lookups(t: Template) -> list[Lookup]:
    """The lookups any one of which finds every tuple ``t`` matches: one per
    actual field, then the shape (always last)."""
    n = len(t.fields)
    out = [
        Lookup(field_key(n, i, f.value)) for i, f in enumerate(t.fields) if isinstance(f, Actual)
    ]
    allowed = [_tags(f) for f in t.fields]
    if all(len(s) == 1 for s in allowed):
        out.append(Lookup(SHAPE + bytes((n, *[next(iter(s)) for s in allowed]))))
    else:

        def accept(key: bytes) -> bool:
            return all(tag in s for tag, s in zip(key[2:], allowed, strict=True))

        out.append(Lookup(SHAPE + bytes((n,)), accept))
    return out
