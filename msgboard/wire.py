"""What the Python client and its subscriptions share about the wire:
gRPC failures and in-stream errors turned into msgboard errors (the one
mapping back from status codes), and selectors read from their protobuf.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import grpc

from msgboard import codec
from msgboard.engine.board import SelectorView
from msgboard.errors import ERROR_KEY, MsgboardError, from_wire
from msgboard.v1 import board_pb2 as pb


def _error(e: grpc.RpcError) -> MsgboardError:
    call: Any = e if isinstance(e, grpc.Call | grpc.aio.AioRpcError) else None
    code = call.code() if call is not None else None
    details = (call.details() if call is not None else None) or str(e)
    name = ""
    if call is not None:
        for key, value in call.trailing_metadata() or ():
            if key == ERROR_KEY:
                name = str(value)
    return from_wire(code.name if code is not None else "UNKNOWN", details, name)


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """Turns gRPC failures into msgboard errors, in one place."""
    try:
        yield
    except grpc.RpcError as e:
        raise _error(e) from None


def _selector_view(p: pb.Selector) -> SelectorView:
    return SelectorView(
        p.id,
        codec.selector_spec_from_pb(p.spec),
        p.durable,
        p.attached,
        p.outstanding,
        p.delivered,
        p.dropped,
    )


def _in_stream(e: pb.Error) -> MsgboardError:
    """The error a stream reported in one of its answers."""
    return from_wire(_code_name(e.code), e.message, e.name)


def _code_name(number: int) -> str:
    """The name of a gRPC status code number."""
    for c in grpc.StatusCode:
        if c.value[0] == number:
            return c.name
    return "UNKNOWN"
