"""The proto enums and the engine's values they stand for: one table each.

A table is written once, engine value to proto number (``to_pb``); the way
back (``from_pb``) is derived from it, so the two directions cannot drift
apart. A proto3 enum's 0 (``*_UNSPECIFIED``) means "not set": a table that
gives it a meaning says so with ``unset`` (an unset overflow policy is
REJECT), and that number is never sent. A number this version does not know
is InvalidArgument (``value``), or the caller's default (``from_pb.get``)
where an old peer may send one.

The conversions that use these tables are in ``messages`` (sections,
dispositions), ``patterns`` (value types) and ``specs`` (policies,
operations, roles, positions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

from msgboard import results
from msgboard.associative import ValueType
from msgboard.errors import InvalidArgument
from msgboard.message import ExitKind, Section
from msgboard.spec import Disposition, Op, OverflowPolicy, Position, Role, UnmatchedPolicy
from msgboard.v1 import board_pb2 as pb

V = TypeVar("V")
N = TypeVar("N", bound=int)


class EnumTable(Generic[V, N]):
    """One enum's mapping: ``to_pb`` (engine value to proto number) as
    written, ``from_pb`` (proto number to engine value) derived from it,
    with 0 standing for ``unset`` if that is given."""

    __slots__ = ("from_pb", "to_pb", "what")

    def __init__(self, what: str, table: Mapping[V, N], *, unset: V | None = None) -> None:
        self.what = what
        self.to_pb: dict[V, N] = dict(table)
        self.from_pb: dict[int, V] = {n: v for v, n in table.items()}
        if len(self.from_pb) != len(table) or 0 in self.from_pb:
            raise ValueError(f"{what}: each value needs its own non-zero number")
        if unset is not None:
            self.from_pb[0] = unset

    def value(self, number: int, where: str) -> V:
        """The engine's value of ``number``; InvalidArgument naming
        ``where`` for a number this version does not know."""
        try:
            return self.from_pb[number]
        except KeyError:
            raise InvalidArgument(f"{where}: unknown {self.what} {number}") from None


SECTION = EnumTable(
    "section",
    {
        Section.UNPROCESSED: pb.SECTION_UNPROCESSED,
        Section.HISTORY: pb.SECTION_HISTORY,
        Section.SCHEDULED: pb.SECTION_SCHEDULED,
    },
)

EXIT_KIND = EnumTable(
    "exit kind",
    {
        ExitKind.TAKEN: pb.EXIT_KIND_TAKEN,
        ExitKind.ACKED: pb.EXIT_KIND_ACKED,
        ExitKind.MOVED: pb.EXIT_KIND_MOVED,
        ExitKind.DEAD_LETTERED: pb.EXIT_KIND_DEAD_LETTERED,
        ExitKind.EXPIRED: pb.EXIT_KIND_EXPIRED,
        ExitKind.DROPPED: pb.EXIT_KIND_DROPPED,
    },
)

DISPOSITION = EnumTable(
    "disposition",
    {
        Disposition.STORED: pb.DISPOSITION_STORED,
        Disposition.OVERFLOWED: pb.DISPOSITION_OVERFLOWED,
        Disposition.DEAD_LETTERED: pb.DISPOSITION_DEAD_LETTERED,
        Disposition.DROPPED: pb.DISPOSITION_DROPPED,
        Disposition.DUPLICATE: pb.DISPOSITION_DUPLICATE,
    },
)

VALUE_TYPE = EnumTable(
    "value type",
    {
        ValueType.NULL: pb.VALUE_TYPE_NULL,
        ValueType.BOOL: pb.VALUE_TYPE_BOOL,
        ValueType.INT: pb.VALUE_TYPE_INT,
        ValueType.FLOAT: pb.VALUE_TYPE_FLOAT,
        ValueType.STRING: pb.VALUE_TYPE_STRING,
        ValueType.BYTES: pb.VALUE_TYPE_BYTES,
    },
)

OVERFLOW = EnumTable(
    "policy",
    {
        OverflowPolicy.REJECT: pb.OVERFLOW_POLICY_REJECT,
        OverflowPolicy.DROP_NEW: pb.OVERFLOW_POLICY_DROP_NEW,
        OverflowPolicy.DEAD_LETTER: pb.OVERFLOW_POLICY_DEAD_LETTER,
        OverflowPolicy.DROP_HEAD: pb.OVERFLOW_POLICY_DROP_HEAD,
    },
    unset=OverflowPolicy.REJECT,
)

UNMATCHED = EnumTable(
    "policy",
    {
        UnmatchedPolicy.HOLD: pb.UNMATCHED_POLICY_HOLD,
        UnmatchedPolicy.DISCARD: pb.UNMATCHED_POLICY_DISCARD,
        UnmatchedPolicy.DEAD_LETTER: pb.UNMATCHED_POLICY_DEAD_LETTER,
    },
    unset=UnmatchedPolicy.HOLD,
)

OP = EnumTable(
    "operation",
    {
        Op.MOVE: pb.OPERATION_MOVE,
        Op.COPY: pb.OPERATION_COPY,
        Op.DELETE: pb.OPERATION_DELETE,
        Op.BOUNCE: pb.OPERATION_BOUNCE,
    },
    unset=Op.MOVE,
)

ROLE = EnumTable(
    "role",
    {
        Role.NORMAL: pb.ROLE_NORMAL,
        Role.DEFAULT: pb.ROLE_DEFAULT,
        Role.OVERFLOW: pb.ROLE_OVERFLOW,
    },
    unset=Role.NORMAL,
)

#: Where a selector or subscription starts (POSITION_LATEST is Browse's alone).
POSITION = EnumTable(
    "position",
    {
        Position.CURRENT: pb.POSITION_CURRENT,
        Position.HEAD: pb.POSITION_OLDEST,
        Position.SEQ: pb.POSITION_SEQ,
        Position.TIME: pb.POSITION_TIME,
    },
    unset=Position.CURRENT,
)

#: Where a Browse page starts (POSITION_CURRENT is a selector's alone; an
#: unset one depends on the direction, so it has no value here).
START = EnumTable(
    "position",
    {
        results.Start.OLDEST: pb.POSITION_OLDEST,
        results.Start.LATEST: pb.POSITION_LATEST,
        results.Start.SEQ: pb.POSITION_SEQ,
        results.Start.TIME: pb.POSITION_TIME,
    },
)
