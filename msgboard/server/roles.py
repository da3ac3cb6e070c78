"""The server asks the board's cluster role before it serves a client
(``msgboard.cluster.Role``): ``RoleCheck``, the outermost interceptor of
a replicating board, refuses every Board call with the role's refusal
(UNAVAILABLE, NotPrimary and the primary's address) while the board is not
the primary. With static roles a primary never refuses; leadership through
etcd will change its role while it runs, and this is where the server
follows. A standby's server (``standby.py``) refuses everything anyway. A board
of a cluster counts the unary calls it let in (``Role.counting``), so that
a switchover hands over only once they are answered, and the streams it
let in (PostStream, Subscribe): once a switchover starts
(``Role.handover``) a stream takes no new request; what it took in is
answered, and it ends with NotPrimary naming the successor (the client
opens it again there, sending a refused batch again with its keys).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

from msgboard.details import abort
from msgboard.errors import NotPrimary
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import replication_pb2 as rpb

if TYPE_CHECKING:  # msgboard.cluster is loaded only by a board that replicates
    from msgboard.cluster import Role

#: The calls a role refuses: the Board service's (health, reflection and
#: replication answer whatever the role).
PREFIX = "/" + pb.DESCRIPTOR.services_by_name["Board"].full_name + "/"
#: The boards' replication service, served beside the Board service.
REPLICATION = rpb.DESCRIPTOR.services_by_name["Replication"].full_name
#: How often an open stream looks whether a switchover started (seconds).
LOOK = 0.05


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
            if self.role.counting and handler.stream_stream is not None:
                streamed: grpc.RpcMethodHandler[Any, Any] = streamed_handler(handler, self.role)
                return streamed
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
            if role.handover is not None:
                # The switchover began after RoleCheck let this call in, and
                # may have seen no call held: it is refused, not run (the
                # switchover sets ``handover`` before it counts the calls).
                await abort(context, NotPrimary(role.handover))
            answer = inner(request, context)
            return await answer if inspect.isawaitable(answer) else answer
        finally:
            role.calls -= 1

    return grpc.unary_unary_rpc_method_handler(
        unary, handler.request_deserializer, handler.response_serializer
    )


def streamed_handler(handler: Any, role: Role) -> Any:
    """``handler`` (a stream both ways: PostStream, Subscribe), counting
    itself in ``role.streams`` while it runs, and ending once a switchover
    starts: its requests end there (``Cut``), what it took in is answered,
    and the call ends with NotPrimary naming the successor."""
    inner = handler.stream_stream

    async def stream(requests: Any, context: Any) -> Any:
        role.streams += 1  # the event loop's thread only
        cut = Cut(requests, role, context)
        try:
            async for answer in inner(cut, context):
                yield answer
            if cut.cut is not None:
                await abort(context, NotPrimary(cut.cut))
        finally:
            cut.close()
            role.streams -= 1

    return grpc.stream_stream_rpc_method_handler(
        stream, handler.request_deserializer, handler.response_serializer
    )


class Cut:
    """A stream's requests until a switchover starts (``role.handover``,
    looked at every ``LOOK`` seconds while a request is awaited): then they
    end, as if the client had closed its side, and ``cut`` is the
    successor's address. Cut before its first request, the call ends with
    NotPrimary at once (nothing was taken in)."""

    _END = object()

    def __init__(self, requests: Any, role: Role, context: Any) -> None:
        self._requests = aiter(requests)
        self._role = role
        self._context = context
        self._next: asyncio.Future[Any] | None = None
        self._seen = False
        self.cut: str | None = None

    def __aiter__(self) -> Cut:
        return self

    async def _read(self) -> Any:
        return await anext(self._requests, self._END)

    async def __anext__(self) -> Any:
        while self.cut is None:
            if self._role.handover is not None:
                self.cut = self._role.handover
                break
            if self._next is None:
                self._next = asyncio.ensure_future(self._read())
            done, _ = await asyncio.wait((self._next,), timeout=LOOK)
            if done and self._role.handover is None:
                request, self._next = self._next.result(), None
                if request is self._END:
                    raise StopAsyncIteration
                self._seen = True
                return request
        self.close()  # a request on its way is refused: the client sends it again
        if not self._seen:
            await abort(self._context, NotPrimary(self.cut))
        raise StopAsyncIteration

    def close(self) -> None:
        if self._next is not None:
            self._next.cancel()
            self._next = None


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
