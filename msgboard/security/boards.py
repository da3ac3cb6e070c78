"""Who may call the boards' replication service: ``BoardsOnly``.

The replication service (``msgboard.v1.Replication``: a standby follows and
seeds from its primary, ``msgboard cluster status`` asks for its standbys'
lag) is for the cluster's boards, not for users: the users file and its
permissions do not apply to it, and the service itself checks the cluster's
token. With ``cluster_cert_cn`` set, this interceptor asks more before the
service runs: the caller's client certificate, verified by the TLS layer
against ``--tls-client-ca``, must carry one of the cluster's common names;
any other caller gets UNAUTHENTICATED, whatever token it shows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

import grpc

from msgboard.details import abort
from msgboard.errors import Unauthenticated

#: The calls this interceptor checks.
REPLICATION = "/msgboard.v1.Replication/"


def common_name(context: Any) -> str:
    """The common name of the caller's verified client certificate, or ""."""
    cns = context.auth_context().get("x509_common_name") or ()
    return str(cns[0].decode(errors="replace")) if cns else ""


class BoardsOnly(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Refuses a replication call whose client certificate does not carry
    one of ``names``."""

    def __init__(self, names: Collection[str]) -> None:
        self.names = frozenset(names)

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(REPLICATION):
            return handler
        h: Any = handler
        kinds = (
            (h.unary_unary, grpc.unary_unary_rpc_method_handler, False),
            (h.unary_stream, grpc.unary_stream_rpc_method_handler, True),
            (h.stream_unary, grpc.stream_unary_rpc_method_handler, False),
            (h.stream_stream, grpc.stream_stream_rpc_method_handler, True),
        )
        for behavior, make, streams in kinds:
            if behavior is not None:
                checked = self._stream(behavior) if streams else self._unary(behavior)
                wrapped: Any = make(checked, h.request_deserializer, h.response_serializer)
                return wrapped  # type: ignore[no-any-return]
        return handler

    async def _check(self, context: Any) -> None:
        name = common_name(context)
        if name not in self.names:
            shown = f"one named {name!r}" if name else "none"
            await abort(
                context,
                Unauthenticated(
                    "the replication service needs a client certificate of the cluster's "
                    f"boards (cluster_cert_cn); the call showed {shown}"
                ),
            )

    def _unary(self, behavior: Any) -> Any:
        async def run(request: Any, context: Any) -> Any:
            await self._check(context)
            return await behavior(request, context)

        return run

    def _stream(self, behavior: Any) -> Any:
        async def run(request: Any, context: Any) -> Any:
            await self._check(context)
            async for answer in behavior(request, context):
                yield answer

        return run
