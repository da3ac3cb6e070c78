"""One listening server for a board of a cluster, whatever its role: the
``Switchboard`` interceptor hands each call to the ``Pipeline`` of the
role the board has now (a standby's refusals, or the primary's services
with their interceptors), so a change of role swaps the pipeline, not the
server.

Why not a new server per role: stopping a gRPC server kills the calls it
has received but not yet handed to the application (the client sees
CANCELLED, and cannot tell that nothing ran), and the port must be bound
again, which something else on the machine may have taken meanwhile.
With one server, a call that arrives during a change of role is answered
by one pipeline or the other: refused before it ran, or served.

A pipeline counts the calls it runs; when the board stops leading, the
old pipeline is drained (``Pipeline.drain``): its calls get a grace
period, then those still running (long streams, say) are cancelled, before
the board under them closes.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import grpc

from msgboard.details import abort
from msgboard.errors import Unavailable
from msgboard.server.rewrap import rewrap

__all__ = ["Pipeline", "Switchboard"]

if TYPE_CHECKING:  # grpc's classes are generic only in its stubs
    Handler = grpc.RpcMethodHandler[Any, Any]
    Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]]


class Pipeline:
    """The services of one role and the interceptors in front of them, in
    the order a ``grpc.aio.server(interceptors=...)`` would run them.
    Services are added as to a server (``add_XServicer_to_server(s, p)``)."""

    def __init__(self, interceptors: Sequence[grpc.aio.ServerInterceptor] = ()) -> None:  # type: ignore[type-arg]
        self.interceptors = list(interceptors)
        self._methods: dict[str, Handler] = {}
        self._services: dict[str, dict[str, Handler]] = {}
        self._generic: list[Any] = []  # grpc.GenericRpcHandler
        #: The tasks of the calls this pipeline runs now.
        self.running: set[asyncio.Task[Any]] = set()
        #: Set by ``drain`` before it cancels what still runs.
        self.draining = False

    # -- what generated code calls on a server ---------------------------------

    def add_generic_rpc_handlers(self, handlers: Iterable[Any]) -> None:
        self._generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Handler]) -> None:
        self._services[service] = handlers
        for name, handler in handlers.items():
            self._methods[f"/{service}/{name}"] = handler

    def install(self, server: Any) -> None:
        """Adds the services to ``server`` itself (a server made with this
        pipeline's interceptors serves as the pipeline would, with no
        switchboard between: a board that never changes role)."""
        server.add_generic_rpc_handlers(tuple(self._generic))
        for service, handlers in self._services.items():
            server.add_registered_method_handlers(service, handlers)

    # -- serving ---------------------------------------------------------------

    def _find(self, details: grpc.HandlerCallDetails) -> Handler | None:
        found = self._methods.get(details.method)
        if found is not None:
            return found
        for generic in self._generic:
            handler: Handler | None = generic.service(details)
            if handler is not None:
                return handler
        return None

    async def handler(self, details: grpc.HandlerCallDetails) -> Handler | None:
        """The handler that serves the call, through the interceptors."""

        async def at(i: int, d: grpc.HandlerCallDetails) -> Handler | None:
            if i == len(self.interceptors):
                return self._find(d)
            next_: Any = functools.partial(at, i + 1)
            found: Handler | None = await self.interceptors[i].intercept_service(next_, d)
            return found

        found = await at(0, details)
        return None if found is None else _tracked(found, self)

    async def drain(self, grace: float) -> None:
        """Lets the calls in progress finish for ``grace`` seconds, then
        cancels those still running and waits for them to end."""
        if self.running and grace > 0:
            await asyncio.wait(set(self.running), timeout=grace)
        self.draining = True
        for task in set(self.running):
            task.cancel()
        while self.running:
            await asyncio.wait(set(self.running), timeout=1.0)


class Switchboard(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """The only interceptor of the board's server: every call goes to the
    pipeline in use (the server itself has no services)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def use(self, pipeline: Pipeline) -> Pipeline:
        """Sends the calls that arrive from now on to ``pipeline``; returns
        the one used until now (its calls in progress go on there)."""
        old, self.pipeline = self.pipeline, pipeline
        return old

    async def intercept_service(  # type: ignore[override]  # None: no such method
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> Handler | None:
        return await self.pipeline.handler(details)


#: What a call still running when its pipeline is drained answers: the
#: board stopped leading under it, so it may or may not have been done
#: (a client sends again only what changes nothing twice).
STOPPED = "this board stopped leading while the call ran; connect again"


def _tracked(handler: Handler, pipeline: Pipeline) -> Handler:
    """``handler`` with its behaviour counted in ``pipeline.running`` while
    it runs; cancelled by a drain, it ends with UNAVAILABLE (a task
    cancelled from outside would leave the client waiting)."""
    return rewrap(handler, functools.partial(_running, pipeline))  # type: ignore[no-any-return]


@asynccontextmanager
async def _running(
    pipeline: Pipeline, streams_in: bool, request: Any, context: Any
) -> AsyncIterator[Any]:
    task = asyncio.current_task()
    assert task is not None
    pipeline.running.add(task)
    try:
        yield request
    except asyncio.CancelledError:
        if not pipeline.draining:
            raise
        await abort(context, Unavailable(STOPPED))
    finally:
        pipeline.running.discard(task)
