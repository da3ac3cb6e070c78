"""TLS for both ends: the server's certificates (re-read on SIGHUP) and the
client's channel (TLS, mutual TLS, a bearer token).

The server uses ``grpc.dynamic_ssl_server_credentials``: gRPC asks a fetcher
for a new certificate configuration at each new connection's handshake, so
``ServerCerts.reload`` only reads and checks the files and leaves the new
configuration for the next handshake. Connections already open keep their
TLS session: a reload drops nothing.

A client sends its token as gRPC metadata (``authorization: Bearer``) only
over TLS or to a loopback address: ``channel`` refuses to send it in
plaintext to another host.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import ssl
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import grpc

from msgboard.errors import ConfigError, InvalidArgument

log = logging.getLogger("msgboard.tls")

#: The metadata key of a bearer token, and its value's prefix.
AUTH_KEY = "authorization"
BEARER = "Bearer "

_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    # A board that comes back is found within 5 s (gRPC's default waits up
    # to 120 s between attempts to connect).
    ("grpc.max_reconnect_backoff_ms", 5000),
]


def host_of(address: str) -> str:
    """The host part of HOST:PORT (``[::1]:7878`` -> ``::1``)."""
    host = address.rsplit(":", 1)[0] if ":" in address else address
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    for scheme in ("dns:///", "ipv4:", "ipv6:"):
        if host.startswith(scheme):
            host = host[len(scheme) :]
    return host


def is_loopback(address: str) -> bool:
    """True for an address on 127.0.0.0/8, ::1 or ``localhost``. No name is
    resolved: any other name counts as another host."""
    host = host_of(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror}") from None


class _Files(NamedTuple):
    cert: bytes
    key: bytes
    client_ca: bytes | None


class ServerCerts:
    """The server's certificate, key and (mutual TLS) client CA files."""

    def __init__(self, cert: str, key: str, client_ca: str = "") -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self._lock = threading.Lock()
        self._pending: Any = None
        self._initial = self._configuration(self._load())

    def _load(self) -> _Files:
        """Reads the files and checks them with Python's ssl module, so that a
        bad file is a clear error now rather than a failed handshake later."""
        files = _Files(
            _read(self.cert, "tls_cert"),
            _read(self.key, "tls_key"),
            _read(self.client_ca, "tls_client_ca") if self.client_ca else None,
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            ctx.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, ValueError) as e:
            raise ConfigError(
                f"tls_cert {self.cert} / tls_key {self.key}: not a matching PEM "
                f"certificate chain and private key ({e})"
            ) from None
        if files.client_ca is not None:
            try:
                ctx.load_verify_locations(cafile=self.client_ca)
            except (ssl.SSLError, ValueError) as e:
                raise ConfigError(
                    f"tls_client_ca {self.client_ca}: not PEM CA certificates ({e})"
                ) from None
        return files

    @staticmethod
    def _configuration(f: _Files) -> Any:
        return grpc.ssl_server_certificate_configuration([(f.key, f.cert)], f.client_ca)

    def credentials(self) -> grpc.ServerCredentials:
        """Server credentials whose certificates ``reload`` can replace."""
        return grpc.dynamic_ssl_server_credentials(
            self._initial, self._fetch, require_client_authentication=bool(self.client_ca)
        )

    def reload(self) -> None:
        """Reads the files again; new connections get them. A bad file
        raises ConfigError and the current certificates stay."""
        config = self._configuration(self._load())
        with self._lock:
            self._pending = config

    def _fetch(self) -> Any:
        # Called by gRPC at each handshake: the new configuration once, then
        # None ("no change").
        with self._lock:
            config, self._pending = self._pending, None
        return config


def channel_credentials(
    tls_ca: str = "", tls_cert: str = "", tls_key: str = ""
) -> grpc.ChannelCredentials:
    """TLS channel credentials: trust ``tls_ca`` (empty: the system's roots)
    and, for mutual TLS, show ``tls_cert`` with ``tls_key``."""
    if bool(tls_cert) != bool(tls_key):
        raise InvalidArgument("--tls-cert and --tls-key go together: give both or neither")

    def read(path: str, what: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise InvalidArgument(f"{what} {path}: {e.strerror}") from None

    return grpc.ssl_channel_credentials(
        read(tls_ca, "--tls-ca") if tls_ca else None,
        read(tls_key, "--tls-key") if tls_key else None,
        read(tls_cert, "--tls-cert") if tls_cert else None,
    )


#: What a failed connection's gRPC text says, the likely cause, and the flags
#: that fix it: gRPC itself says only "failed to connect to all addresses".
_CONNECT_HINTS = (
    (
        "WRONG_VERSION_NUMBER",
        "the board speaks plaintext, not TLS: connect without --tls-ca/--tls-cert "
        "(and MSGBOARD_TLS_CA unset), or check --server",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "the board's certificate is not one this client trusts: --tls-ca (or "
        "MSGBOARD_TLS_CA) must be the CA that signed it, it must not have expired, "
        "and --server must use a name it was issued for",
    ),
    (
        "Socket closed",
        "the board closed the connection in the TLS handshake: it likely serves TLS "
        "(connect with --tls-ca FILE or MSGBOARD_TLS_CA), or wants a client "
        "certificate (--tls-cert FILE --tls-key FILE, signed by the CA of its "
        "--tls-client-ca and not expired)",
    ),
    (
        "Connection refused",
        "nothing listens there: is the board running (msgboard serve), and is "
        "--server (or MSGBOARD_SERVER) its address?",
    ),
)


def connect_hint(text: str) -> str:
    """The likely cause of a failed connection and the flag to fix it, from
    gRPC's text (``failed to connect to all addresses; last error: ...``);
    "" when the text is not a connection failure it knows."""
    if "failed to connect" not in text:
        return ""
    return next((hint for key, hint in _CONNECT_HINTS if key in text), "")


def check_token_transport(address: str, token: str, tls: bool) -> None:
    """Refuses to send a token in plaintext to a host other than loopback."""
    if token and not tls and not is_loopback(address):
        raise InvalidArgument(
            f"refusing to send a token in plaintext to {address}: connect with TLS "
            "(--tls-ca / MSGBOARD_TLS_CA), or to a loopback address"
        )


_CALL_FIELDS = ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")


class _CallDetails(
    collections.namedtuple("_CallDetails", _CALL_FIELDS),  # type: ignore[misc]
    grpc.ClientCallDetails,
):
    """A sync call's details with the token added (gRPC's own examples)."""


class TokenInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[type-arg]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[type-arg]
    grpc.StreamStreamClientInterceptor,  # type: ignore[type-arg]
):
    """A sync channel's interceptor adding the token to every call."""

    def __init__(self, token: str) -> None:
        self._pair = (AUTH_KEY, BEARER + token)

    def _d(self, d: Any) -> Any:
        fields = {f: getattr(d, f, None) for f in _CALL_FIELDS}
        fields["metadata"] = [*(d.metadata or ()), self._pair]
        return _CallDetails(**fields)

    def intercept_unary_unary(self, continuation: Any, d: Any, request: Any) -> Any:
        return continuation(self._d(d), request)

    def intercept_unary_stream(self, continuation: Any, d: Any, request: Any) -> Any:
        return continuation(self._d(d), request)

    def intercept_stream_unary(self, continuation: Any, d: Any, requests: Any) -> Any:
        return continuation(self._d(d), requests)

    def intercept_stream_stream(self, continuation: Any, d: Any, requests: Any) -> Any:
        return continuation(self._d(d), requests)


class AioTokenInterceptor(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[type-arg]
    """An asyncio channel's interceptor adding the token to stream calls
    (the asyncio client only opens Subscribe streams)."""

    def __init__(self, token: str) -> None:
        self._pair = (AUTH_KEY, BEARER + token)

    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        d = client_call_details
        details = grpc.aio.ClientCallDetails(
            d.method,
            d.timeout,
            grpc.aio.Metadata(*(d.metadata or ()), self._pair),
            d.credentials,
            d.wait_for_ready,
        )
        return await continuation(details, request_iterator)


class Connection(NamedTuple):
    """How a client reaches a board: the address and its credentials."""

    address: str
    token: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    #: Use TLS even with no CA file (the system's trusted roots).
    tls: bool = False

    @property
    def secure(self) -> bool:
        return self.tls or bool(self.tls_ca or self.tls_cert)

    def check(self) -> None:
        check_token_transport(self.address, self.token, self.secure)

    def channel(self, options: Sequence[tuple[str, Any]] = _OPTIONS) -> grpc.Channel:
        """A sync channel with these credentials."""
        self.check()
        if self.secure:
            ch = grpc.secure_channel(
                self.address,
                channel_credentials(self.tls_ca, self.tls_cert, self.tls_key),
                options=list(options),
            )
        else:
            ch = grpc.insecure_channel(self.address, options=list(options))
        if self.token:
            return grpc.intercept_channel(ch, TokenInterceptor(self.token))
        return ch

    def aio_channel(self, options: Sequence[tuple[str, Any]] = _OPTIONS) -> grpc.aio.Channel:
        """An asyncio channel with these credentials."""
        self.check()
        interceptors: Any = [AioTokenInterceptor(self.token)] if self.token else None
        if self.secure:
            creds = channel_credentials(self.tls_ca, self.tls_cert, self.tls_key)
            return grpc.aio.secure_channel(
                self.address, creds, options=list(options), interceptors=interceptors
            )
        return grpc.aio.insecure_channel(
            self.address, options=list(options), interceptors=interceptors
        )
