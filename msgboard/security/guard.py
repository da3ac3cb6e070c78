"""The server's gate: one interceptor that, before any servicer runs, finds
who is calling (``msgboard.security.auth``), checks what the call needs
(``msgboard.security.permissions.RPCS``) and counts what the caller holds open
(``Quota``). Servicers never see credentials.

Installed only on a board with a users file. A denied call ends with
UNAUTHENTICATED or PERMISSION_DENIED before the servicer sees it; a stream's
later requests (each PostStream batch) are checked as they arrive, and the
first one denied ends the stream. Listings are filtered on the way out.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc

from msgboard.details import abort
from msgboard.engine import Board
from msgboard.engine.events import USER_DENIED
from msgboard.errors import MsgboardError, NotFound, PermissionDenied, ResourceExhausted
from msgboard.security import permissions
from msgboard.security.auth import User, Users, caller
from msgboard.security.permissions import RPCS, Need, SelectorRef
from msgboard.v1 import board_pb2 as pb

log = logging.getLogger("msgboard.guard")
SERVICE = pb.DESCRIPTOR.services_by_name["Board"].full_name
#: Served to anyone: health probes carry no credentials.
#: Services the users and permissions do not apply to: health, and the
#: boards' replication service, which checks the cluster's own token
#: (``msgboard/cluster/service.py``).
_OPEN_SERVICES = ("/grpc.health.v1.Health/", "/msgboard.v1.Replication/")


class Quota:
    """What each user holds open, against the caps: open streams (PostStream
    and Subscribe), blocked Takes and Reads, Subscribe consumers."""

    def __init__(self, max_streams: int, max_waits: int, max_consumers: int) -> None:
        self.caps = {"streams": max_streams, "waits": max_waits, "consumers": max_consumers}
        self.held: collections.Counter[tuple[str, str]] = collections.Counter()

    @contextlib.contextmanager
    def hold(self, user: User, *kinds: str) -> Iterator[None]:
        """Holds one of each kind for the block; ResourceExhausted past a cap."""
        for kind in kinds:
            cap = self.caps[kind]
            if cap and self.held[user.name, kind] >= cap:
                raise ResourceExhausted(
                    f"user {user.name!r} already has {cap} {_WHAT[kind]} open (the cap, "
                    f"max_{kind}); close one first"
                )
        for kind in kinds:
            self.held[user.name, kind] += 1
        try:
            yield
        finally:
            for kind in kinds:
                self.held[user.name, kind] -= 1


_WHAT = {
    "streams": "streams (PostStream and Subscribe)",
    "waits": "blocked Takes and Reads",
    "consumers": "Subscribe consumers",
}


def _waits(request: Any) -> bool:
    t = request.timeout
    return bool(t.seconds or t.nanos)


class Guard(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """The interceptor: authentication, the RPC table, quotas, filtered
    listings."""

    def __init__(self, users: Users, board: Board, quota: Quota) -> None:
        self.users = users
        self.board = board
        self.quota = quota

    def authenticate(self, context: Any) -> User:
        """The caller, also left in ``auth.caller`` for the servicer and the
        access log ("?" for a caller who does not authenticate)."""
        auth = context.auth_context()
        cns = auth.get("x509_common_name") or ()
        cn = cns[0].decode(errors="replace") if cns else None
        caller.set("?")
        user = self.users.authenticate(tuple(context.invocation_metadata() or ()), cn)
        caller.set(user.name)
        permissions.permits.set(self._permits(user))
        return user

    def _permits(self, user: User) -> Callable[[str, str], bool]:
        """``permissions.permits`` for ``user``: a refusal is announced."""

        def permits(verb: str, queue: str) -> bool:
            if permissions.allows(user, verb, queue):
                return True
            what = f"user {user.name!r} may not {verb} queue {queue!r}"
            self.board.emit(USER_DENIED, user.name, what)
            return False

        return permits

    async def allow(self, user: User, needs: list[Need]) -> None:
        for need in needs:
            queue = need.queue
            if isinstance(queue, SelectorRef):
                try:
                    view = await asyncio.wrap_future(self.board.get_selector_async(queue.id))
                except NotFound:
                    # No such selector: the servicer answers NOT_FOUND, which
                    # tells nothing about queues.
                    continue
                # A pull's queue here is the one it fills.
                spec = view.spec
                queue = spec.destination if spec.source_link else spec.source
            try:
                permissions.check(user, need.verbs, queue)
            except PermissionDenied as e:
                self.board.emit(USER_DENIED, user.name, str(e))  # on $sys
                raise

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(details)
        method = details.method
        if handler is None or method.startswith(_OPEN_SERVICES):
            return handler
        service, _, name = method.lstrip("/").partition("/")
        rpc = RPCS.get(name) if service == SERVICE else None
        h: Any = handler
        if h.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(h.unary_unary, rpc, name),
                h.request_deserializer,
                h.response_serializer,
            )
        if h.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(h.stream_stream, rpc, name),
                h.request_deserializer,
                h.response_serializer,
            )
        if h.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._unary_stream(h.unary_stream), h.request_deserializer, h.response_serializer
            )
        return grpc.stream_unary_rpc_method_handler(
            self._stream_unary(h.stream_unary), h.request_deserializer, h.response_serializer
        )

    def _unary(self, behavior: Any, rpc: permissions.Rpc | None, name: str) -> Any:
        async def call(request: Any, context: Any) -> Any:
            try:
                user = self.authenticate(context)
                if rpc is not None:
                    await self.allow(user, rpc.needs(request))
                kinds = ("waits",) if name in ("Take", "Read") and _waits(request) else ()
                with self.quota.hold(user, *kinds):
                    response = await behavior(request, context)
            except MsgboardError as e:
                await abort(context, e)
            if rpc is not None and rpc.filter is not None:
                response = rpc.filter(response, lambda q: permissions.sees(user, q))
            return response

        return call

    def _stream(self, behavior: Any, rpc: permissions.Rpc | None, name: str) -> Any:
        async def call(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            kinds = ("streams", "consumers") if name == "Subscribe" else ("streams",)
            held = contextlib.ExitStack()
            try:
                first = None
                if name == "Subscribe":
                    # Only the first request (open) names a queue. Read it
                    # before answering, so that a refusal does not race the
                    # client's first write.
                    first = await anext(aiter(requests), None)
                user = self.authenticate(context)
                if first is not None and rpc is not None:
                    await self.allow(user, rpc.needs(first))
                held.enter_context(self.quota.hold(user, *kinds))
            except MsgboardError as e:
                await abort(context, e)
            with held:
                if name == "Subscribe":
                    inner = _prepend(first, requests)
                elif rpc is not None:
                    inner = self._checked(requests, user, rpc, context)
                else:
                    inner = requests
                async for response in behavior(inner, context):
                    yield response

        return call

    async def _checked(
        self, requests: AsyncIterator[Any], user: User, rpc: permissions.Rpc, context: Any
    ) -> AsyncIterator[Any]:
        async for r in requests:
            try:
                await self.allow(user, rpc.needs(r))
            except MsgboardError as e:
                await abort(context, e)
            yield r

    def _unary_stream(self, behavior: Any) -> Any:
        async def call(request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                self.authenticate(context)
            except MsgboardError as e:
                await abort(context, e)
            async for response in behavior(request, context):
                yield response

        return call

    def _stream_unary(self, behavior: Any) -> Any:
        async def call(requests: Any, context: Any) -> Any:
            try:
                self.authenticate(context)
            except MsgboardError as e:
                await abort(context, e)
            return await behavior(requests, context)

        return call


async def _prepend(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    if first is None:
        return
    yield first
    async for r in rest:
        yield r
