"""A board's security, assembled from its configuration at start-up.

``Security.build`` loads the certificates and the users file, refuses to
expose a board (a listener outside loopback without both TLS and a users
file exits unless ``insecure``), and hands the server what it needs: the
port's credentials, the interceptor (``msgboard.security.guard``), where snapshots
go. ``reload`` (SIGHUP) reads the certificates and the users file again;
a bad file is logged and the current ones stay.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from msgboard.config import ServeConfig
from msgboard.engine import Board
from msgboard.errors import ConfigError, Exposed, ListenFailed, MsgboardError
from msgboard.security.auth import Users
from msgboard.security.boards import BoardsOnly
from msgboard.security.guard import Guard, Quota
from msgboard.security.snapshot_dir import SnapshotDir
from msgboard.tls import AUTH_KEY, ServerCerts, is_loopback

log = logging.getLogger("msgboard.security")


@dataclasses.dataclass
class Security:
    listen: str
    certs: ServerCerts | None
    users: Users | None
    snapshots: SnapshotDir
    quota: Quota
    insecure: bool = False
    users_path: str = ""
    guard: Guard | None = None
    #: The common names the replication service's callers need (none: the
    #: token alone).
    cluster_cns: tuple[str, ...] = ()

    @classmethod
    def build(cls, c: ServeConfig) -> Security:
        """Raises Exposed, ConfigError, ListenFailed: the server must not
        start. The files are read before the port is tried, so that a bad
        users file is named even when the port is taken (a second board)."""
        listen_parts(c.listen)
        if not is_loopback(c.listen) and not c.insecure:
            missing = [
                what
                for what, ok in (("TLS (--tls-cert, --tls-key)", c.tls), ("--users", c.users))
                if not ok
            ]
            if missing:
                raise Exposed(
                    f"refusing to listen on {c.listen} outside loopback without "
                    f"{' and '.join(missing)}; add them, or --insecure to serve it "
                    "open to anyone who can reach it"
                )
        certs = ServerCerts(c.tls_cert, c.tls_key, c.tls_client_ca) if c.tls else None
        users = Users.load(c.users) if c.users else None
        snapshots = SnapshotDir(c.snapshot_dir, required=users is not None)
        check_listen(c.listen)
        quota = Quota(c.max_streams, c.max_waits, c.max_consumers)
        return cls(
            c.listen, certs, users, snapshots, quota, c.insecure, c.users, cluster_cns=c.cluster_cns
        )

    def credentials(self) -> grpc.ServerCredentials | None:
        """The listening port's credentials; None: plaintext."""
        return self.certs.credentials() if self.certs is not None else None

    def interceptors(self, board: Board) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
        boards: list[grpc.aio.ServerInterceptor[Any, Any]] = (
            [BoardsOnly(self.cluster_cns)] if self.cluster_cns else []
        )
        if self.users is None:
            return [*boards, TokensIgnored()]
        self.guard = Guard(self.users, board, self.quota)
        return [*boards, self.guard]

    def describe(self) -> str:
        """The start-up log line's security part."""
        parts = []
        if self.certs is None:
            parts.append("plaintext")
        else:
            parts.append("mutual TLS" if self.certs.client_ca else "TLS")
        if self.users is None:
            parts.append("open board: no users file, development mode")
        else:
            parts.append(f"{len(self.users.all)} users from {self.users_path}")
        root = self.snapshots.root
        parts.append(f"snapshots under {root}" if root else "snapshots: absolute paths")
        if self.cluster_cns:
            parts.append(f"replication for certificates {', '.join(self.cluster_cns)}")
        return ", ".join(parts)

    def warn(self) -> None:
        """Logs the warning an exposed board gets at every start."""
        if self.insecure and not is_loopback(self.listen):
            off = [w for w, on in (("TLS", self.certs), ("users", self.users)) if on is None]
            if off:
                log.warning(
                    "WARNING: --insecure: listening on %s without %s: anyone who can "
                    "reach it can %s",
                    self.listen,
                    " and ".join(off),
                    "read and delete every queue" if self.users is None else "read the traffic",
                )

    def reload(self) -> None:
        """SIGHUP: the certificates and the users file again."""
        try:
            if self.certs is not None:
                self.certs.reload()
            if self.users is not None:
                users = Users.load(self.users_path)
                self.users = users
                if self.guard is not None:
                    self.guard.users = users
        except MsgboardError as e:
            log.error("reload failed, keeping the current files: %s", e)
            return
        log.info("reloaded: %s", self.describe())


class TokensIgnored(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """An open board's interceptor: the first call that carries a token
    (``authorization`` metadata) is logged, once, as ignored, so that an
    operator who meant to check tokens learns it from the log rather than
    from a breach; later calls pass with one flag tested."""

    def __init__(self) -> None:
        self.warned = False

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        if not self.warned and any(k == AUTH_KEY for k, _ in details.invocation_metadata or ()):
            self.warned = True
            log.warning(
                "WARNING: open board (no users file): tokens are ignored and every call is "
                "allowed; a call to %s carried one. Serve with --users FILE to check them "
                "(logged once)",
                details.method,
            )
        return await continuation(details)


def listen_parts(listen: str) -> tuple[str, int]:
    """HOST and PORT of HOST:PORT; ConfigError if it is not one."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(
            f"listen: {listen!r} is not HOST:PORT (e.g. 127.0.0.1:7878, or 0.0.0.0:7878 "
            "for every interface)"
        )
    return host, int(port_text)


def check_listen(listen: str) -> None:
    """HOST:PORT with a host and a port; ListenFailed if something already
    listens there (before gRPC tries, so the error is one clear line)."""
    host, port = listen_parts(listen)
    if port == 0:
        return
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise ListenFailed(f"cannot listen on {listen}: {e.strerror or e}") from None
    for family, kind, proto, _, addr in infos[:1]:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
            except OSError as e:
                raise ListenFailed(f"cannot listen on {listen}: {e.strerror or e}") from None
