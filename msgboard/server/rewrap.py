"""A gRPC method handler's behaviour wrapped, whatever its kind.

``rewrap(handler, around)`` gives ``handler`` (a ``grpc.RpcMethodHandler``)
with its behaviour, the one of its four kinds it has (unary-unary,
unary-stream, stream-unary, stream-stream), run inside ``around``: an
async context manager made for each call from whether the request
streams, the request (or the requests' async iterator) and the context,
which yields the request(s) to hand the behaviour. A behaviour that is an
async generator is wrapped as one (its answers go through as they come);
any other (a coroutine, or one that writes its answers with
``context.write``) is wrapped as a coroutine. The interceptors that wrap
every call, ``switchboard`` (a call counted while it runs) and
``decoding`` (a request that did not parse refused), say only what they
do around it.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

#: ``around(streams_in, request, context)``: the context a call runs in,
#: yielding the request (or the requests' iterator) to hand on.
Around = Callable[[bool, Any, Any], AbstractAsyncContextManager[Any]]

#: A handler's behaviours, by the field of ``grpc.RpcMethodHandler``.
KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def rewrap(handler: Any, around: Around, **fields: Any) -> Any:
    """``handler`` with its behaviour run inside ``around`` and ``fields``
    (a ``request_deserializer``, say) replaced; as it is if it has no
    behaviour."""
    for kind in KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            wrapped = _wrapped(behaviour, partial(around, kind.startswith("stream")))
            return handler._replace(**{kind: wrapped}, **fields)
    return handler


def _wrapped(behaviour: Any, around: Callable[[Any, Any], AbstractAsyncContextManager[Any]]) -> Any:
    if inspect.isasyncgenfunction(behaviour):

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            async with around(request, context) as given:
                async for answer in behaviour(given, context):
                    yield answer

        return stream

    async def call(request: Any, context: Any) -> Any:
        async with around(request, context) as given:
            answer = behaviour(given, context)
            return await answer if inspect.isawaitable(answer) else answer

    return call
