"""What the Python client and its subscriptions share about the wire:
gRPC failures and in-stream errors turned into msgboard errors (the one
mapping back from status codes: the class and attributes come from the
google.rpc ErrorInfo in ``grpc-status-details-bin``, or in an in-stream
``Error``'s details; a status without one gives the class of its code),
and selectors read from their protobuf.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyPb
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

from msgboard import codec
from msgboard.details import DETAILS_KEY, DOMAIN
from msgboard.errors import MsgboardError, from_wire
from msgboard.results import ConsumerView, SelectorView
from msgboard.tls import connect_hint
from msgboard.v1 import board_pb2 as pb


def rpc_error(e: grpc.RpcError) -> MsgboardError:
    call: Any = e if isinstance(e, grpc.Call | grpc.aio.AioRpcError) else None
    code = call.code() if call is not None else None
    text = (call.details() if call is not None else None) or str(e)
    if code == grpc.StatusCode.UNAVAILABLE and (hint := connect_hint(text)):
        text = f"{hint} ({text})"
    details: list[AnyPb] = []
    if call is not None:
        for key, value in call.trailing_metadata() or ():
            if key == DETAILS_KEY and isinstance(value, bytes):
                with contextlib.suppress(DecodeError):
                    details = list(status_pb2.Status.FromString(value).details)
    return _rebuilt(code.name if code is not None else "UNKNOWN", text, details)


def _rebuilt(code: str, text: str, details: list[AnyPb]) -> MsgboardError:
    """The error of a status: its class and attributes from the details'
    ErrorInfo of domain msgboard (another domain's reason is not a class of
    ours), if any."""
    for d in details:
        info = error_details_pb2.ErrorInfo()
        if d.Unpack(info) and info.domain == DOMAIN:
            e = from_wire(code, text, info.reason, dict(info.metadata))
            e.reason = info.reason
            return e
    return from_wire(code, text)


@contextlib.contextmanager
def mapped() -> Iterator[None]:
    """Turns gRPC failures into msgboard errors, in one place."""
    try:
        yield
    except grpc.RpcError as e:
        raise rpc_error(e) from None


def selector_view(p: pb.Selector) -> SelectorView:
    return SelectorView(
        p.id,
        codec.selector_spec_from_pb(p.spec),
        p.durable,
        p.attached,
        p.outstanding,
        p.delivered,
        p.dropped,
    )


def consumer_view(p: pb.ConsumerInfo) -> ConsumerView:
    return ConsumerView(
        p.id,
        p.peer,
        p.identity,
        p.queue,
        p.selector_id,
        "copy" if p.op == pb.OPERATION_COPY else "move",
        float("inf") if p.unlimited_credit else p.credit,
        p.outstanding,
        p.delivered,
        codec.ts_to_us(p.since),
    )


def in_stream(e: pb.Error) -> MsgboardError:
    """The error a stream reported in one of its answers."""
    return _rebuilt(_code_name(e.code), e.message, list(e.details))


def _code_name(number: int) -> str:
    """The name of a gRPC status code number."""
    for c in grpc.StatusCode:
        if c.value[0] == number:
            return c.name
    return "UNKNOWN"
