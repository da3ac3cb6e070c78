"""Requests that are not valid protobuf, refused as every other bad input is.

gRPC parses each request with the handler's ``request_deserializer``
before any servicer or interceptor sees it; a parse that raises (bad UTF-8
in a string field, truncated bytes, a wrong wire type) would end the call
UNKNOWN, with the exception's class name as its text and a traceback in
the log. ``Decoding``, an interceptor installed outermost, gives every
handler a deserializer that answers such bytes with an ``Undecodable``
instead, and a behaviour that ends the call INVALID_ARGUMENT with the
usual details (``msgboard.details``) when it meets one: at once for a
unary request, at that point of the stream for a streamed one (the
requests before it were served).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc

from msgboard.details import abort
from msgboard.errors import InvalidArgument
from msgboard.server.rewrap import rewrap


class Undecodable:
    """A request's bytes that did not parse, and the error saying so."""

    __slots__ = ("error",)

    def __init__(self, error: InvalidArgument) -> None:
        self.error = error


def _decoding(deserialize: Callable[[bytes], Any] | None, method: str) -> Any:
    if deserialize is None:
        return None
    name = method.rsplit("/", 1)[-1]

    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as e:  # DecodeError, or the C parser's own
            why = str(e) or type(e).__name__
            return Undecodable(
                InvalidArgument(
                    f"request: {len(data)} bytes that are not a valid {name} request "
                    f"protobuf ({why}): a string field must be UTF-8, a message whole"
                )
            )

    return decode


async def _checked(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
    async for r in requests:
        if isinstance(r, Undecodable):
            await abort(context, r.error)
        yield r


@asynccontextmanager
async def _decoded(streams_in: bool, request: Any, context: Any) -> AsyncIterator[Any]:
    """A unary request that did not parse ends the call at once; a stream's
    requests are checked as they are read (``_checked``)."""
    if streams_in:
        yield _checked(request, context)
        return
    if isinstance(request, Undecodable):
        await abort(context, request.error)
    yield request


class Decoding(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Refuses a request that is not valid protobuf INVALID_ARGUMENT, with
    details. Install it first (outermost): its handler is the one run, so
    no other interceptor sees an ``Undecodable``."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        h = await continuation(details)
        if h is None or h.request_deserializer is None:
            return h
        decode = _decoding(h.request_deserializer, details.method)
        return rewrap(h, _decoded, request_deserializer=decode)
