"""Queue specs and selector specs as protobufs, with the positions a
selector, a subscription or a Browse page starts at.

Reading one checks what the engine's constructors cannot see: a policy,
operation, role or position this version does not know (``enums``), both
``max_history`` and ``unlimited_history`` set, and a selector given the
``credit`` or ``quota`` its kind does not have (``selector_spec_from_pb``).
"""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration

from msgboard import results
from msgboard.codec.enums import OP, OVERFLOW, POSITION, ROLE, START, UNMATCHED
from msgboard.codec.messages import ts_to_us, us_to_ts
from msgboard.codec.patterns import pattern_from_pb, pattern_to_pb
from msgboard.codec.times import checked_duration, checked_ts
from msgboard.errors import InvalidArgument
from msgboard.spec import (
    DEDUP_WINDOW,
    MAX_REDELIVERY,
    LinkSpec,
    Op,
    Position,
    QueueSpec,
    Redelivery,
    SelectorSpec,
)
from msgboard.spec import UNLIMITED as UNLIMITED_HISTORY
from msgboard.v1 import board_pb2 as pb


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
        overflow=OVERFLOW.value(p.overflow, "spec.overflow"),
        max_history=UNLIMITED_HISTORY if p.unlimited_history else p.max_history,
        dead_letter=p.dead_letter,
        unmatched=UNMATCHED.value(p.unmatched, "spec.unmatched"),
        auto_delete=p.auto_delete,
        max_deliveries=p.max_deliveries,
        dedup_window=_dedup_window(p),
        redelivery=(
            redelivery_from_pb(p.redelivery, "spec.redelivery")
            if p.HasField("redelivery")
            else None
        ),
    )


def _dedup_window(p: pb.QueueSpec) -> int:
    """A spec's dedup window in µs (unset: the default); one under 1 µs is
    refused, not stored as 0, which means something else: no window."""
    if not p.HasField("dedup_window"):
        return DEDUP_WINDOW
    where = "spec.dedup_window"
    d = p.dedup_window
    us = checked_duration(d, where)
    if us == 0 and (d.seconds or d.nanos):
        raise InvalidArgument(
            f"{where}: {d.nanos} ns is under 1 µs, the window's unit; 0 is no window "
            "(a key is kept only while its message is on the board)",
            field=where,
        )
    return us


def spec_to_pb(s: QueueSpec) -> pb.QueueSpec:
    return pb.QueueSpec(
        name=s.name,
        transient=s.transient,
        max_unprocessed=s.max_unprocessed,
        overflow=OVERFLOW.to_pb[s.overflow],
        max_history=0 if s.max_history == UNLIMITED_HISTORY else s.max_history,
        unlimited_history=s.max_history == UNLIMITED_HISTORY,
        dead_letter=s.dead_letter,
        unmatched=UNMATCHED.to_pb[s.unmatched],
        auto_delete=s.auto_delete,
        max_deliveries=s.max_deliveries,
        dedup_window=us_to_duration(s.dedup_window),
        redelivery=None if s.redelivery is None else redelivery_to_pb(s.redelivery),
    )


def redelivery_from_pb(p: pb.Redelivery, where: str = "redelivery") -> Redelivery:
    """A redelivery policy; a multiplier of 0 (unset) is 1, an unset max the
    longest (1 day). The engine checks the values."""
    return Redelivery(
        checked_duration(p.initial, f"{where}.initial"),
        p.multiplier or 1.0,
        checked_duration(p.max, f"{where}.max") if p.HasField("max") else MAX_REDELIVERY,
    )


def redelivery_to_pb(r: Redelivery) -> pb.Redelivery:
    return pb.Redelivery(
        initial=us_to_duration(r.initial), multiplier=r.multiplier, max=us_to_duration(r.most)
    )


def duration_to_us(d: Duration) -> int:
    return d.seconds * 1_000_000 + d.nanos // 1000


def us_to_duration(us: int) -> Duration:
    seconds, rest = divmod(us, 1_000_000)
    return Duration(seconds=seconds, nanos=rest * 1000)


# ---------------------------------------------------------------- selectors


def op_from_pb(op: int, where: str = "op") -> Op:
    return OP.value(op, where)


def position_from_pb(pos: int, where: str = "start") -> Position:
    """A selector's or subscription's start; LATEST is Browse's alone."""
    if pos == pb.POSITION_LATEST:
        raise InvalidArgument(
            f"{where}: POSITION_LATEST is for Browse; a selector starts elsewhere"
        )
    return POSITION.value(pos, where)


def position_to_pb(pos: Position) -> pb.Position.ValueType:
    return POSITION.to_pb[pos]


def browse_start_from_pb(pos: int, reverse: bool, where: str = "start") -> results.Start:
    """Where a Browse page starts; unspecified: OLDEST forward, LATEST
    backward. CURRENT is a selector's alone."""
    if pos == pb.POSITION_UNSPECIFIED:
        return results.Start.LATEST if reverse else results.Start.OLDEST
    if pos == pb.POSITION_CURRENT:
        raise InvalidArgument(
            f"{where}: POSITION_CURRENT is for selectors; a page starts elsewhere"
        )
    return START.value(pos, where)


def browse_start_to_pb(start: results.Start) -> pb.Position.ValueType:
    return START.to_pb[start]


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
        start_time=checked_ts(p.start_time, f"{where}.start_time")
        if p.HasField("start_time")
        else 0,
        role=ROLE.value(p.role, f"{where}.role"),
        destination_link=p.destination_link,
        source_link=p.source_link,
        translator=p.translator,
    )


def selector_spec_to_pb(s: SelectorSpec, out: pb.SelectorSpec | None = None) -> pb.SelectorSpec:
    p = pb.SelectorSpec() if out is None else out
    p.source = s.source
    if not s.pattern.matches_all:
        pattern_to_pb(s.pattern, p.pattern)
    p.op = OP.to_pb[s.op]
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
    p.role = ROLE.to_pb[s.role]
    p.destination_link = s.destination_link
    p.source_link = s.source_link
    p.translator = s.translator
    return p


def link_spec_from_pb(p: pb.LinkSpec) -> LinkSpec:
    """A link spec as asked or stored (the engine checks its values)."""
    return LinkSpec(
        name=p.name,
        server=p.server,
        token=p.token,
        tls_ca_pem=p.tls_ca_pem,
        tls_cert_pem=p.tls_cert_pem,
        tls_key_pem=p.tls_key_pem,
        tls=p.tls,
    )


def link_spec_to_pb(s: LinkSpec, out: pb.LinkSpec | None = None) -> pb.LinkSpec:
    """``s`` as a protobuf, secrets included: redact it (``s.redacted()``)
    before it leaves the board."""
    p = pb.LinkSpec() if out is None else out
    p.name, p.server, p.token, p.tls = s.name, s.server, s.token, s.tls
    p.tls_ca_pem, p.tls_cert_pem, p.tls_key_pem = s.tls_ca_pem, s.tls_cert_pem, s.tls_key_pem
    return p


#: A link's state, as LinkView says it and as the proto's LinkState.
LINK_STATES = {
    "connecting": pb.LINK_STATE_CONNECTING,
    "connected": pb.LINK_STATE_CONNECTED,
    "disconnected": pb.LINK_STATE_DISCONNECTED,
}


def link_to_pb(v: results.LinkView) -> pb.Link:
    """A link and its figures, its secrets left out."""
    p = pb.Link(
        state=LINK_STATES.get(v.state, pb.LINK_STATE_UNSPECIFIED),
        connected=v.connected,
        forwarded=v.forwarded,
        duplicates=v.duplicates,
        in_flight=v.in_flight,
        lag_messages=v.lag_messages,
        lag_seconds=v.lag_seconds,
        last_error=v.last_error,
        selectors=v.selectors,
    )
    link_spec_to_pb(v.spec.redacted(), p.spec)
    p.spec.has_token = bool(v.spec.token)
    p.spec.has_key = bool(v.spec.tls_key_pem)
    if v.since:
        us_to_ts(v.since, p.since)
    return p


def link_from_pb(p: pb.Link) -> results.LinkView:
    """A link as a board showed it."""
    states = {n: s for s, n in LINK_STATES.items()}
    return results.LinkView(
        spec=link_spec_from_pb(p.spec),
        state=states.get(p.state, "unknown"),
        connected=p.connected,
        forwarded=p.forwarded,
        duplicates=p.duplicates,
        in_flight=p.in_flight,
        lag_messages=p.lag_messages,
        lag_seconds=p.lag_seconds,
        last_error=p.last_error,
        selectors=tuple(p.selectors),
        since=ts_to_us(p.since) if p.HasField("since") else 0,
    )
