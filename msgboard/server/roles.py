"""The server asks the board's cluster role before it serves a client
(``msgboard.cluster.Role``): ``RoleCheck``, the outermost interceptor of
a replicating board, refuses every Board call with the role's refusal
(UNAVAILABLE, NotPrimary and the primary's address) while the board is not
the primary. With static roles a primary never refuses; leadership through
etcd will change its role while it runs, and this is where the server
follows. A standby's server (``standby.py``) refuses everything anyway. A board
of a cluster counts the unary calls it let in (``Role.counting``), so that
a switchover hands over only once they are answered.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from msgboard.details import abort
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import replication_pb2 as rpb

if TYPE_CHECKING:  # msgboard.cluster is loaded only by a board that replicates
    from msgboard.cluster import Role

#: The calls a role refuses: the Board service's (health, reflection and
#: replication answer whatever the role).
PREFIX = "/" + pb.DESCRIPTOR.services_by_name["Board"].full_name + "/"
#: The boards' replication service, served beside the Board service.
REPLICATION = rpb.DESCRIPTOR.services_by_name["Replication"].full_name


class RoleCheck(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Refuses Board calls while ``role`` says this board is not the primary."""

    def __init__(self, role: Role) -> None:
        self.role = role

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(PREFIX):
            return handler
        refusal = self.role.refusal()
        if refusal is None:
            if self.role.counting and handler.unary_unary is not None:
                counted: grpc.RpcMethodHandler[Any, Any] = counted_handler(handler, self.role)
                return counted
            return handler
        refused: grpc.RpcMethodHandler[Any, Any] = refusing_handler(handler, refusal)
        return refused


def counted_handler(handler: Any, role: Role) -> Any:
    """``handler`` (unary), counting itself in ``role.calls`` while it runs:
    a switchover waits for the calls already let in."""
    inner = handler.unary_unary

    async def unary(request: Any, context: Any) -> Any:
        role.calls += 1  # the event loop's thread only
        try:
            answer = inner(request, context)
            return await answer if inspect.isawaitable(answer) else answer
        finally:
            role.calls -= 1

    return grpc.unary_unary_rpc_method_handler(
        unary, handler.request_deserializer, handler.response_serializer
    )


def refusing_handler(handler: Any, refusal: Any) -> Any:
    """A handler of ``handler``'s kind that answers ``refusal``."""

    async def unary(request: Any, context: Any) -> Any:
        await abort(context, refusal)

    async def stream(request: Any, context: Any) -> Any:
        await abort(context, refusal)
        yield  # an async generator: the method streams its answers

    kinds = (
        (handler.unary_unary, grpc.unary_unary_rpc_method_handler, unary),
        (handler.unary_stream, grpc.unary_stream_rpc_method_handler, stream),
        (handler.stream_unary, grpc.stream_unary_rpc_method_handler, unary),
        (handler.stream_stream, grpc.stream_stream_rpc_method_handler, stream),
    )
    for behavior, make, refuse in kinds:
        if behavior is not None:
            return make(refuse, handler.request_deserializer, handler.response_serializer)
    return handler
