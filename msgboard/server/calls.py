"""Every call as it starts and ends: who is connected, and the access log.

``Calls`` is the outermost interceptor of a served board. It counts the
calls in progress by peer (``msgboard_connections`` is how many peers have
one: ``msgboard.server.metrics``) and, when there is an access log
(``--access-log``), writes one line per call once it ends: method, peer,
identity (on a board with users), queue, status and duration, through the
logger ``msgboard.access`` (``msgboard.server.logs`` formats it). Never a message
body, a token or any other request field: the queue is read from the
request's queue-naming field only.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from msgboard.security.auth import caller

log = logging.getLogger("msgboard.access")

#: The fields that name a call's queue, by request type: the first one set.
_QUEUE_FIELDS = ("queue", "name", "source")


def queue_of(request: Any) -> str:
    """The queue a request names ("" if none): its ``queue`` or ``name``,
    a CreateQueue's spec name, a CreateSelector's source, a Subscribe's
    open."""
    fields = request.DESCRIPTOR.fields_by_name
    for name in _QUEUE_FIELDS:
        if name in fields and fields[name].type == fields[name].TYPE_STRING:
            return str(getattr(request, name))
    for inner in ("spec", "open"):
        if inner in fields and request.HasField(inner):
            return queue_of(getattr(request, inner))
    return ""


class Call:
    """One call in progress."""

    __slots__ = ("identity", "method", "peer", "queue", "started")

    def __init__(self, method: str, peer: str) -> None:
        self.method = method
        self.peer = peer
        self.queue = ""
        self.identity = ""
        self.started = time.perf_counter()


class Calls(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Counts the calls in progress by peer; logs each one that ends when
    ``access`` is true, with the identity the guard found (``auth.caller``:
    "" on a board without users, "?" for a caller refused)."""

    def __init__(self, access: bool = False) -> None:
        self.access = access
        self.open: collections.Counter[str] = collections.Counter()

    def peers(self) -> int:
        """How many peers have a call in progress."""
        return len(self.open)

    def _start(self, method: str, context: Any) -> Call:
        call = Call(method, context.peer() or "")
        self.open[call.peer] += 1
        context.add_done_callback(lambda ctx: self._end(call, ctx))
        return call

    def _end(self, call: Call, context: Any) -> None:
        n = self.open[call.peer] - 1
        if n:
            self.open[call.peer] = n
        else:
            del self.open[call.peer]
        if not self.access:
            return
        code = context.code()
        if context.cancelled() and code is None:
            code = grpc.StatusCode.CANCELLED
        status = "OK" if code is None else code.name
        identity = call.identity
        ms = (time.perf_counter() - call.started) * 1000
        log.info(
            "%s peer=%s identity=%s queue=%s status=%s duration_ms=%.2f",
            call.method,
            call.peer,
            identity or "-",
            call.queue or "-",
            status,
            ms,
            extra={
                "access": {
                    "method": call.method,
                    "peer": call.peer,
                    "identity": identity,
                    "queue": call.queue,
                    "status": status,
                    "duration_ms": round(ms, 3),
                }
            },
        )

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(details)
        if handler is None:
            return handler
        name = details.method.rsplit("/", 1)[-1]
        h: Any = handler
        make: Any
        if h.unary_unary is not None:
            make, behavior = grpc.unary_unary_rpc_method_handler, self._unary(h.unary_unary, name)
        elif h.unary_stream is not None:
            make, behavior = grpc.unary_stream_rpc_method_handler, self._out(h.unary_stream, name)
        elif h.stream_unary is not None:
            make, behavior = grpc.stream_unary_rpc_method_handler, self._in(h.stream_unary, name)
        else:
            make = grpc.stream_stream_rpc_method_handler
            behavior = self._both(h.stream_stream, name)
        return make(behavior, h.request_deserializer, h.response_serializer)  # type: ignore[no-any-return]

    # Each wrapper runs the guard's behaviour in its own context, so what
    # the guard left in ``auth.caller`` is read here once the call is done.

    def _unary(self, behavior: Any, method: str) -> Any:
        async def call(request: Any, context: Any) -> Any:
            c = self._start(method, context)
            c.queue = queue_of(request)
            try:
                return await behavior(request, context)
            finally:
                c.identity = caller.get()

        return call

    def _out(self, behavior: Any, method: str) -> Any:
        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            c = self._start(method, context)
            c.queue = queue_of(request)
            try:
                async for r in behavior(request, context):
                    yield r
            finally:
                c.identity = caller.get()

        return call

    def _in(self, behavior: Any, method: str) -> Any:
        async def call(requests: AsyncIterator[Any], context: Any) -> Any:
            c = self._start(method, context)
            try:
                return await behavior(_noting(requests, c), context)
            finally:
                c.identity = caller.get()

        return call

    def _both(self, behavior: Any, method: str) -> Any:
        async def call(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            c = self._start(method, context)
            try:
                async for r in behavior(_noting(requests, c), context):
                    yield r
            finally:
                c.identity = caller.get()

        return call


async def _noting(requests: AsyncIterator[Any], call: Call) -> AsyncIterator[Any]:
    """The requests of a stream; the first that names a queue names the call's."""
    async for r in requests:
        if not call.queue:
            call.queue = queue_of(r)
        yield r
