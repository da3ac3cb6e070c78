"""Messages and their parts as protobufs: tuple values, timestamps,
sections, the message itself, the messages of a post and the receipts it
answers with.

On the hot path of every post and delivery: a message that has the bytes it
was posted or stored as (``message.wire``) is parsed from them, in C, and
only the board's fields are set here. The bytes a store keeps for a message
are ``records``'s; the enum tables used here are ``enums``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from google.protobuf.struct_pb2 import NULL_VALUE
from google.protobuf.timestamp_pb2 import Timestamp

from msgboard.associative.tuples import INT64_MAX, INT64_MIN
from msgboard.codec.enums import DISPOSITION, EXIT_KIND, SECTION
from msgboard.codec.times import checked_ts
from msgboard.errors import InvalidArgument
from msgboard.message import Exit, Fields, Message, Section, Value, build, keep_wire, left
from msgboard.spec import Disposition, Receipt
from msgboard.v1 import board_pb2 as pb


def section_from_pb(n: int, where: str = "section") -> Section | None:
    """The section a request names, None if unset (both sections);
    InvalidArgument for a number this version does not know."""
    if n == pb.SECTION_UNSPECIFIED:
        return None
    s = SECTION.from_pb.get(n)
    if s is None:
        raise InvalidArgument(f"{where}: unknown value {n}")
    return s


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
            p.section = SECTION.to_pb[m.section]
        if m.posted_at:
            us_to_ts(m.posted_at, p.posted_at)
        elif not m._pure:
            p.ClearField("posted_at")
        if m.processed_at:
            us_to_ts(m.processed_at, p.processed_at)
        p.delivery_count = m.delivery_count
        if m.redeliver_at:
            us_to_ts(m.redeliver_at, p.redeliver_at)
        if m.exit is not None and not record:
            exit_to_pb(m.exit, p.exit)
        return p
    if not record:
        p.queue = m.queue
        p.seq = m.seq
        p.section = SECTION.to_pb[m.section]
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
    if m.key:
        p.key = m.key
    if m.not_before:
        us_to_ts(m.not_before, p.not_before)
    if m.processed_at:
        us_to_ts(m.processed_at, p.processed_at)
    if m.delivery_count:
        p.delivery_count = m.delivery_count
    if m.redeliver_at:
        us_to_ts(m.redeliver_at, p.redeliver_at)
    if m.exit is not None and not record:
        exit_to_pb(m.exit, p.exit)
    return p


def exit_to_pb(e: Exit, out: pb.Exit) -> None:
    """How a history message left, as a protobuf."""
    out.kind = EXIT_KIND.to_pb[e.kind]
    if e.reason:
        out.reason = e.reason
    if e.queue:
        out.queue = e.queue
    if e.selector:
        out.selector = e.selector
    if e.seq:
        out.seq = e.seq


def exit_from_pb(p: pb.Exit) -> Exit | None:
    """How a history message left; None for a kind this version does not
    know (a newer board's), read as "not recorded"."""
    kind = EXIT_KIND.from_pb.get(p.kind)
    return None if kind is None else Exit(kind, p.reason, p.queue, p.selector, p.seq)


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
    m = build(
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
        section if section is not None else SECTION.from_pb.get(p.section, Section.UNPROCESSED),
        None,
        False,
        p.key,
        ts_to_us(p.not_before) if has("not_before") else 0,
    )
    if has("redeliver_at"):  # a Browse answer's, rare
        m = dataclasses.replace(m, redeliver_at=ts_to_us(p.redeliver_at))
    if has("exit"):  # a history message's
        left(m, exit_from_pb(p.exit))
    return m


def messages_from_pb(ps: Iterable[pb.Message], where: str = "messages") -> list[Message]:
    """Messages to post (no queue, seq or section yet), which keep the bytes
    they came as; InvalidArgument names the message: ``messages[2].tuple[0]:
    no kind set``. Clears in ``ps`` what a post does not set."""
    out = []
    for i, p in enumerate(ps):
        if p.HasField("expires_at"):
            checked_ts(p.expires_at, f"{where}[{i}].expires_at")
        if p.HasField("not_before"):
            checked_ts(p.not_before, f"{where}[{i}].not_before")
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
        if p.queue or p.seq or p.HasField("processed_at") or p.HasField("exit"):
            p.ClearField("queue")
            p.ClearField("seq")
            p.ClearField("processed_at")
            p.ClearField("exit")
            left(m, None)
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


def receipts_to_pb(rs: list[Receipt]) -> tuple[list[int], list[pb.Disposition.ValueType]]:
    """The seqs and dispositions of a PostResponse (or PostStreamResponse)."""
    return [r.seq for r in rs], [DISPOSITION.to_pb[r.disposition] for r in rs]


def receipts_from_pb(seqs: Iterable[int], dispositions: Sequence[int]) -> list[Receipt]:
    """Receipts from a post's answer. A server too old to send dispositions
    sends seqs alone: a seq is then STORED, a 0 DROPPED (all it could mean)."""
    out = []
    for i, seq in enumerate(seqs):
        d = None
        if i < len(dispositions):
            d = DISPOSITION.from_pb.get(pb.Disposition.ValueType(dispositions[i]))
        out.append(Receipt(seq, d or (Disposition.STORED if seq else Disposition.DROPPED)))
    return out
