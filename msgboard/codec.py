"""Conversions between msgboard's Python types and their protobuf form.

One place for it: the server and client use it on the wire, and the LMDB
store uses the same ``msgboard.v1.Message`` encoding for its records, so a
snapshot can be decoded by any language that has the proto.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from google.protobuf.struct_pb2 import NULL_VALUE
from google.protobuf.timestamp_pb2 import Timestamp

from msgboard import results
from msgboard.associative import (
    ALL,
    ANY,
    MAX_ARITY,
    Actual,
    AddressPattern,
    AnyField,
    FieldPattern,
    Formal,
    Pattern,
    Prefix,
    Range,
    Template,
    ValueType,
)
from msgboard.associative.tuples import INT64_MAX, INT64_MIN, located
from msgboard.errors import InvalidArgument
from msgboard.message import Fields, Message, Section, Value, build, keep_wire
from msgboard.spec import UNLIMITED as UNLIMITED_HISTORY
from msgboard.spec import (
    Disposition,
    Op,
    OverflowPolicy,
    Position,
    QueueSpec,
    Receipt,
    Role,
    SelectorSpec,
    UnmatchedPolicy,
)
from msgboard.v1 import board_pb2 as pb

SECTION_TO_PB = {
    Section.UNPROCESSED: pb.SECTION_UNPROCESSED,
    Section.HISTORY: pb.SECTION_HISTORY,
}
_SECTION_FROM_PB = {v: k for k, v in SECTION_TO_PB.items()}


def value_to_pb(v: Value, out: pb.FieldValue, where: str = "value") -> None:
    """Fills ``out`` with ``v``; InvalidArgument for a type that is not a Value."""
    if v is None:
        out.null = NULL_VALUE
    elif v is True or v is False:
        out.bool = v
    elif type(v) is int:
        if not INT64_MIN <= v <= INT64_MAX:
            raise InvalidArgument(f"{where}: integer {v} does not fit in 64 bits")
        out.int = v
    elif type(v) is float:
        out.float = v
    elif type(v) is str:
        out.string = v
    elif type(v) is bytes:
        out.bytes = v
    else:
        raise InvalidArgument(
            f"{where}: {type(v).__name__} is not a tuple type (null, bool, int, float, str, bytes)"
        )


def value_from_pb(p: pb.FieldValue, where: str = "value") -> Value:
    kind = p.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument(f"{where}: no kind set")
    if kind == "null":
        return None
    v: Value = getattr(p, kind)
    return v


def fields_to_pb(fields: Iterable[Value]) -> list[pb.FieldValue]:
    result = []
    for i, v in enumerate(fields):
        p = pb.FieldValue()
        value_to_pb(v, p, f"tuple[{i}]")
        result.append(p)
    return result


def fields_from_pb(ps: Iterable[pb.FieldValue]) -> Fields:
    return tuple(value_from_pb(p, f"tuple[{i}]") for i, p in enumerate(ps))


def us_to_ts(us: int, out: Timestamp) -> None:
    out.seconds, rest = divmod(us, 1_000_000)
    out.nanos = rest * 1000


def ts_to_us(ts: Timestamp) -> int:
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def message_to_pb(m: Message, out: pb.Message | None = None, *, record: bool = False) -> pb.Message:
    """``m`` as a protobuf. With ``record``, leaves out what a store key or
    table already says (queue, seq, section). A message that has the bytes
    it was posted or stored as (``message.wire``) is parsed from them, in C,
    and only the board's fields are set here."""
    p = pb.Message() if out is None else out
    w = m._wire
    if w is not None:
        p.MergeFromString(w)
        if not record:
            p.queue = m.queue
            p.seq = m.seq
            p.section = SECTION_TO_PB[m.section]
        if m.posted_at:
            us_to_ts(m.posted_at, p.posted_at)
        elif not m._pure:
            p.ClearField("posted_at")
        if m.processed_at:
            us_to_ts(m.processed_at, p.processed_at)
        p.delivery_count = m.delivery_count
        return p
    if not record:
        p.queue = m.queue
        p.seq = m.seq
        p.section = SECTION_TO_PB[m.section]
    if m.address:
        p.address = m.address
    if m.priority:
        p.priority = m.priority
    if m.headers:
        p.headers.update(m.headers)
    if m.reply_to:
        p.reply_to = m.reply_to
    if m.expires_at:
        us_to_ts(m.expires_at, p.expires_at)
    if m.tuple:
        p.tuple.extend(fields_to_pb(m.tuple))
    if m.posted_at:
        us_to_ts(m.posted_at, p.posted_at)
    if m.content_type:
        p.content_type = m.content_type
    if m.body:
        p.body = m.body
    if m.processed_at:
        us_to_ts(m.processed_at, p.processed_at)
    if m.delivery_count:
        p.delivery_count = m.delivery_count
    return p


def message_from_pb(
    p: pb.Message,
    *,
    queue: str | None = None,
    seq: int | None = None,
    section: Section | None = None,
) -> Message:
    """A Message from its protobuf; keyword arguments override what the
    protobuf says (a store record leaves them out). On the hot path of every
    post, record read and delivery: empty parts cost a truth test, not a
    conversion."""
    has = p.HasField
    return build(
        fields_from_pb(p.tuple) if p.tuple else (),
        p.address,
        p.priority,
        dict(p.headers) if p.headers else {},
        p.reply_to,
        ts_to_us(p.expires_at) if has("expires_at") else 0,
        p.content_type,
        p.body,
        p.queue if queue is None else queue,
        p.seq if seq is None else seq,
        ts_to_us(p.posted_at) if has("posted_at") else 0,
        ts_to_us(p.processed_at) if has("processed_at") else 0,
        p.delivery_count,
        section if section is not None else _SECTION_FROM_PB.get(p.section, Section.UNPROCESSED),
    )


def messages_from_pb(ps: Iterable[pb.Message], where: str = "messages") -> list[Message]:
    """Messages to post (no queue, seq or section yet), which keep the bytes
    they came as; InvalidArgument names the message: ``messages[2].tuple[0]:
    no kind set``. Clears in ``ps`` what a post does not set."""
    out = []
    for i, p in enumerate(ps):
        try:
            m = message_from_pb(p, queue="", seq=0, section=Section.UNPROCESSED)
        except InvalidArgument as e:
            raise e.within(f"{where}[{i}]") from None
        # The posted bytes are kept (``message.wire``), without what they
        # must never carry (cleared in ``ps``: a client's message that
        # went through message_to_pb says its section); a posted_at or
        # delivery_count makes them impure.
        if p.section:
            p.ClearField("section")
        if p.queue or p.seq or p.HasField("processed_at"):
            p.ClearField("queue")
            p.ClearField("seq")
            p.ClearField("processed_at")
        pure = not (p.delivery_count or p.HasField("posted_at"))
        out.append(keep_wire(m, p.SerializeToString(), pure))
    return out


def messages_to_pb(ms: Iterable[Message], where: str = "messages") -> list[pb.Message]:
    """Messages as protobufs for a post (without queue, seq and section,
    which a post does not keep); InvalidArgument names the message:
    ``messages[2].tuple[0]: list is not a tuple type ...``."""
    out = []
    for i, m in enumerate(ms):
        try:
            out.append(message_to_pb(m, record=True))
        except InvalidArgument as e:
            raise e.within(f"{where}[{i}]") from None
    return out


_DISPOSITION_TO_PB = {
    Disposition.STORED: pb.DISPOSITION_STORED,
    Disposition.OVERFLOWED: pb.DISPOSITION_OVERFLOWED,
    Disposition.DEAD_LETTERED: pb.DISPOSITION_DEAD_LETTERED,
    Disposition.DROPPED: pb.DISPOSITION_DROPPED,
}
_DISPOSITION_FROM_PB = {v: k for k, v in _DISPOSITION_TO_PB.items()}


def receipts_to_pb(rs: list[Receipt]) -> tuple[list[int], list[pb.Disposition.ValueType]]:
    """The seqs and dispositions of a PostResponse (or PostStreamResponse)."""
    return [r.seq for r in rs], [_DISPOSITION_TO_PB[r.disposition] for r in rs]


def receipts_from_pb(seqs: Iterable[int], dispositions: Sequence[int]) -> list[Receipt]:
    """Receipts from a post's answer. A server too old to send dispositions
    sends seqs alone: a seq is then STORED, a 0 DROPPED (all it could mean)."""
    out = []
    for i, seq in enumerate(seqs):
        d = None
        if i < len(dispositions):
            d = _DISPOSITION_FROM_PB.get(pb.Disposition.ValueType(dispositions[i]))
        out.append(Receipt(seq, d or (Disposition.STORED if seq else Disposition.DROPPED)))
    return out


def encode_record(m: Message) -> bytes:
    """The bytes a store keeps for a message: the bytes it was posted or
    stored as (``message.wire``) followed by the board's fields, else its
    encoding field by field."""
    w = m._wire
    if w is None:
        return message_to_pb(m, record=True).SerializeToString()
    if not m._pure:
        # Bytes read from a record carry its posted_at and delivery_count:
        # dropped (in C), so that a record moved or given back again and
        # again does not grow by its fields each time.
        p = _parse(w)
        p.ClearField("posted_at")
        p.ClearField("delivery_count")
        w = p.SerializeToString()
    return w + board_fields(m.posted_at, m.processed_at, m.delivery_count)


@functools.lru_cache(maxsize=256)
def board_fields(posted_at: int, processed_at: int, delivery_count: int) -> bytes:
    """The encoded fields the board sets on a record; cached, as the
    messages of one group commit share one time."""
    p = pb.Message(delivery_count=delivery_count)
    if posted_at:
        us_to_ts(posted_at, p.posted_at)
    if processed_at:
        us_to_ts(processed_at, p.processed_at)
    return p.SerializeToString()


def decode_record(data: bytes, queue: str, seq: int, section: Section) -> Message:
    """The message a store keeps as ``data``. An unprocessed record keeps
    its bytes (``message.wire``: they never carry processed_at); a history
    one does not."""
    m = message_from_pb(_parse(data), queue=queue, seq=seq, section=section)
    return keep_wire(m, data, False) if section is Section.UNPROCESSED else m


_parse = pb.Message.FromString


def processed_suffix(processed_at: int, delivery_count: int) -> bytes:
    """The bytes that, appended to an unprocessed record, make it the
    processed one: protobuf merges concatenated messages, a later scalar
    winning."""
    return board_fields(0, processed_at, delivery_count)


# ---------------------------------------------------------------- patterns

_VALUE_TYPE_TO_PB = {
    ValueType.NULL: pb.VALUE_TYPE_NULL,
    ValueType.BOOL: pb.VALUE_TYPE_BOOL,
    ValueType.INT: pb.VALUE_TYPE_INT,
    ValueType.FLOAT: pb.VALUE_TYPE_FLOAT,
    ValueType.STRING: pb.VALUE_TYPE_STRING,
    ValueType.BYTES: pb.VALUE_TYPE_BYTES,
}
_VALUE_TYPE_FROM_PB = {v: k for k, v in _VALUE_TYPE_TO_PB.items()}


def field_pattern_to_pb(f: FieldPattern, out: pb.FieldPattern) -> None:
    """Fills ``out`` with ``f`` (valid by construction, so this cannot fail)."""
    if isinstance(f, Actual):
        value_to_pb(f.value, out.actual)
    elif isinstance(f, Formal):
        out.formal = _VALUE_TYPE_TO_PB[f.type]
    elif isinstance(f, AnyField):
        out.any.SetInParent()
    elif isinstance(f, Range):
        value_to_pb(f.lo, out.range.lo)
        value_to_pb(f.hi, out.range.hi)
    else:
        value_to_pb(f.p, out.prefix)


def field_pattern_from_pb(p: pb.FieldPattern, where: str = "field") -> FieldPattern:
    """A field pattern; InvalidArgument naming ``where`` if it is malformed."""
    kind = p.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument(f"{where}: no kind set")
    if kind == "actual":
        return Actual(value_from_pb(p.actual, f"{where}.actual"))
    if kind == "formal":
        vt = _VALUE_TYPE_FROM_PB.get(p.formal)
        if vt is None:
            raise InvalidArgument(f"{where}.formal: {p.formal} is not a value type")
        return Formal(vt)
    if kind == "any":
        return ANY
    if kind == "range":
        r = p.range
        if not r.HasField("lo") or not r.HasField("hi"):
            raise InvalidArgument(f"{where}.range: lo and hi are both required")
        lo = value_from_pb(r.lo, f"{where}.range.lo")
        hi = value_from_pb(r.hi, f"{where}.range.hi")
        with located(where):
            return Range(lo, hi)  # type: ignore[arg-type]  # Range checks the types
    v = value_from_pb(p.prefix, f"{where}.prefix")
    with located(where):
        return Prefix(v)  # type: ignore[arg-type]  # Prefix checks the type


def template_to_pb(t: Template, out: pb.Template | None = None) -> pb.Template:
    p = pb.Template() if out is None else out
    for f in t.fields:
        field_pattern_to_pb(f, p.fields.add())
    return p


def template_from_pb(p: pb.Template, where: str = "template") -> Template:
    n = len(p.fields)
    if n > MAX_ARITY:
        raise InvalidArgument(f"{where}: {n} fields, at most {MAX_ARITY}")
    return Template(
        tuple(field_pattern_from_pb(f, f"{where}.fields[{i}]") for i, f in enumerate(p.fields))
    )


def address_to_pb(a: AddressPattern, out: pb.AddressPattern | None = None) -> pb.AddressPattern:
    p = pb.AddressPattern() if out is None else out
    if a.kind == "all":
        p.all.SetInParent()
    else:
        setattr(p, a.kind, a.text)
    return p


def address_from_pb(p: pb.AddressPattern, where: str = "address") -> AddressPattern:
    """An address pattern; one with no kind set means every address, as an
    unset one does."""
    kind = p.WhichOneof("kind")
    if kind is None or kind == "all":
        return ALL
    with located(f"{where}.{kind}"):
        return AddressPattern(kind, getattr(p, kind))


def pattern_to_pb(pt: Pattern, out: pb.Pattern | None = None) -> pb.Pattern:
    """``pt`` as a protobuf; the all address pattern is left unset."""
    p = pb.Pattern() if out is None else out
    if pt.address.kind != "all":
        address_to_pb(pt.address, p.address)
    for t in pt.templates:
        template_to_pb(t, p.templates.add())
    if pt.filter:
        p.filter = pt.filter
    return p


def pattern_from_pb(p: pb.Pattern, where: str = "pattern") -> Pattern:
    """A Pattern; InvalidArgument with the path of the first bad part."""
    address = address_from_pb(p.address, f"{where}.address") if p.HasField("address") else ALL
    templates = tuple(
        template_from_pb(t, f"{where}.templates[{i}]") for i, t in enumerate(p.templates)
    )
    try:
        return Pattern(address, templates, p.filter)
    except InvalidArgument as e:
        # Pattern names its own parts "pattern.…": say where this one is.
        text = str(e)
        if where == "pattern" or not text.startswith("pattern."):
            raise
        raise InvalidArgument(where + text[len("pattern") :]) from None


# ---------------------------------------------------------------- queues

E = TypeVar("E")

_OVERFLOW_FROM_PB = {
    pb.OVERFLOW_POLICY_UNSPECIFIED: OverflowPolicy.REJECT,
    pb.OVERFLOW_POLICY_REJECT: OverflowPolicy.REJECT,
    pb.OVERFLOW_POLICY_DROP_NEW: OverflowPolicy.DROP_NEW,
    pb.OVERFLOW_POLICY_DEAD_LETTER: OverflowPolicy.DEAD_LETTER,
}
_OVERFLOW_TO_PB = {v: k for k, v in _OVERFLOW_FROM_PB.items() if k}


_UNMATCHED_FROM_PB = {
    pb.UNMATCHED_POLICY_UNSPECIFIED: UnmatchedPolicy.HOLD,
    pb.UNMATCHED_POLICY_HOLD: UnmatchedPolicy.HOLD,
    pb.UNMATCHED_POLICY_DISCARD: UnmatchedPolicy.DISCARD,
    pb.UNMATCHED_POLICY_DEAD_LETTER: UnmatchedPolicy.DEAD_LETTER,
}
_UNMATCHED_TO_PB = {v: k for k, v in _UNMATCHED_FROM_PB.items() if k}


def _enum(table: Mapping[Any, E], value: int, where: str, what: str) -> E:
    """The engine's value of a proto enum number; InvalidArgument for a
    number this version does not know."""
    try:
        return table[value]
    except KeyError:
        raise InvalidArgument(f"{where}: unknown {what} {value}") from None


def spec_from_pb(p: pb.QueueSpec) -> QueueSpec:
    """A queue spec; InvalidArgument for an unknown policy, or for
    ``max_history`` set with ``unlimited_history``."""
    if p.unlimited_history and p.max_history:
        raise InvalidArgument(
            f"spec.max_history: {p.max_history} with unlimited_history; set one of them"
        )
    return QueueSpec(
        name=p.name,
        transient=p.transient,
        max_unprocessed=p.max_unprocessed,
        overflow=_enum(_OVERFLOW_FROM_PB, p.overflow, "spec.overflow", "policy"),
        max_history=UNLIMITED_HISTORY if p.unlimited_history else p.max_history,
        dead_letter=p.dead_letter,
        unmatched=_enum(_UNMATCHED_FROM_PB, p.unmatched, "spec.unmatched", "policy"),
        auto_delete=p.auto_delete,
        max_deliveries=p.max_deliveries,
    )


def spec_to_pb(s: QueueSpec) -> pb.QueueSpec:
    return pb.QueueSpec(
        name=s.name,
        transient=s.transient,
        max_unprocessed=s.max_unprocessed,
        overflow=_OVERFLOW_TO_PB[s.overflow],
        max_history=0 if s.max_history == UNLIMITED_HISTORY else s.max_history,
        unlimited_history=s.max_history == UNLIMITED_HISTORY,
        dead_letter=s.dead_letter,
        unmatched=_UNMATCHED_TO_PB[s.unmatched],
        auto_delete=s.auto_delete,
        max_deliveries=s.max_deliveries,
    )


# ---------------------------------------------------------------- selectors

_OP_FROM_PB = {
    pb.OPERATION_UNSPECIFIED: Op.MOVE,
    pb.OPERATION_MOVE: Op.MOVE,
    pb.OPERATION_COPY: Op.COPY,
    pb.OPERATION_DELETE: Op.DELETE,
    pb.OPERATION_BOUNCE: Op.BOUNCE,
}
_OP_TO_PB = {v: k for k, v in _OP_FROM_PB.items() if k}
_ROLE_FROM_PB = {
    pb.ROLE_UNSPECIFIED: Role.NORMAL,
    pb.ROLE_NORMAL: Role.NORMAL,
    pb.ROLE_DEFAULT: Role.DEFAULT,
    pb.ROLE_OVERFLOW: Role.OVERFLOW,
}
_ROLE_TO_PB = {v: k for k, v in _ROLE_FROM_PB.items() if k}
_POSITION_FROM_PB = {
    pb.POSITION_UNSPECIFIED: Position.CURRENT,
    pb.POSITION_CURRENT: Position.CURRENT,
    pb.POSITION_OLDEST: Position.HEAD,
    pb.POSITION_SEQ: Position.SEQ,
    pb.POSITION_TIME: Position.TIME,
}
_POSITION_TO_PB = {v: k for k, v in _POSITION_FROM_PB.items() if k}


def op_from_pb(op: int, where: str = "op") -> Op:
    return _enum(_OP_FROM_PB, op, where, "operation")


def position_from_pb(pos: int, where: str = "start") -> Position:
    """A selector's or subscription's start; LATEST is Browse's alone."""
    if pos == pb.POSITION_LATEST:
        raise InvalidArgument(
            f"{where}: POSITION_LATEST is for Browse; a selector starts elsewhere"
        )
    return _enum(_POSITION_FROM_PB, pos, where, "position")


def position_to_pb(pos: Position) -> pb.Position.ValueType:
    return _POSITION_TO_PB[pos]


_START_TO_PB = {
    results.Start.OLDEST: pb.POSITION_OLDEST,
    results.Start.LATEST: pb.POSITION_LATEST,
    results.Start.SEQ: pb.POSITION_SEQ,
    results.Start.TIME: pb.POSITION_TIME,
}
_START_FROM_PB = {v: k for k, v in _START_TO_PB.items()}


def browse_start_from_pb(pos: int, reverse: bool, where: str = "start") -> results.Start:
    """Where a Browse page starts; unspecified: OLDEST forward, LATEST
    backward. CURRENT is a selector's alone."""
    if pos == pb.POSITION_UNSPECIFIED:
        return results.Start.LATEST if reverse else results.Start.OLDEST
    if pos == pb.POSITION_CURRENT:
        raise InvalidArgument(
            f"{where}: POSITION_CURRENT is for selectors; a page starts elsewhere"
        )
    return _enum(_START_FROM_PB, pos, where, "position")


def browse_start_to_pb(start: results.Start) -> pb.Position.ValueType:
    return _START_TO_PB[start]


def selector_spec_from_pb(
    p: pb.SelectorSpec, where: str = "spec", *, stored: bool = False
) -> SelectorSpec:
    """A selector spec. The engine keeps one ``credit``: a terminal
    selector's ``credit`` or a selector to a queue's ``quota``; the other one
    set is InvalidArgument. ``stored``: a record of the board's, which may
    come from before ``quota`` (a selector to a queue kept it in ``credit``)."""
    op = op_from_pb(p.op, f"{where}.op")
    if op in (Op.MOVE, Op.COPY) and not p.destination:  # terminal
        if p.quota:
            raise InvalidArgument(f"{where}.quota: a terminal selector has credit, not a quota")
        credit = p.credit
    elif stored:
        credit = p.quota or p.credit
    elif p.credit or p.unlimited_credit:
        raise InvalidArgument(
            f"{where}.{'credit' if p.credit else 'unlimited_credit'}: "
            "a selector to a queue has a quota, not credit"
        )
    else:
        credit = p.quota
    return SelectorSpec(
        source=p.source,
        pattern=pattern_from_pb(p.pattern, f"{where}.pattern"),
        op=op,
        destination=p.destination,
        credit=credit,
        unlimited_credit=p.unlimited_credit,
        start=position_from_pb(p.start, f"{where}.start"),
        start_seq=p.start_seq,
        start_time=ts_to_us(p.start_time) if p.HasField("start_time") else 0,
        role=_enum(_ROLE_FROM_PB, p.role, f"{where}.role", "role"),
    )


def selector_spec_to_pb(s: SelectorSpec, out: pb.SelectorSpec | None = None) -> pb.SelectorSpec:
    p = pb.SelectorSpec() if out is None else out
    p.source = s.source
    if not s.pattern.matches_all:
        pattern_to_pb(s.pattern, p.pattern)
    p.op = _OP_TO_PB[s.op]
    p.destination = s.destination
    if s.terminal:
        p.credit = s.credit
        p.unlimited_credit = s.unlimited_credit
    elif not s.unlimited_credit:
        p.quota = s.credit
    p.start = position_to_pb(s.start)
    p.start_seq = s.start_seq
    if s.start_time:
        us_to_ts(s.start_time, p.start_time)
    p.role = _ROLE_TO_PB[s.role]
    return p
