"""How a board reaches another board of its cluster: ``channel``.

A standby follows its primary over the replication service; with the
cluster's TLS settings (``Dialing``: the CA that signed the boards'
certificates, and the board's own certificate and key, shown to a primary
that asks for one) the channel is TLS, else plaintext. The settings are the
process's, given once at start-up (``use``), as logging's are: one process
serves one board, and every channel it opens to another board of its
cluster is built the same way, by whichever part opens it.

``msgboard cluster status`` builds its channel here too, from its flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from msgboard.errors import ConfigError

#: A batch is about 1 MiB, but one entry (a group commit) may be larger than
#: gRPC's default 4 MiB limit.
OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


@dataclass(frozen=True)
class Dialing:
    """TLS to the other boards: trust ``ca`` (the CA that signed their
    certificates; empty: plaintext), and show ``cert``/``key`` to a board
    that asks for a client certificate (mutual TLS)."""

    ca: str = ""
    cert: str = ""
    key: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.ca)

    def credentials(self) -> grpc.ChannelCredentials | None:
        """The channel credentials (None: plaintext). Raises ConfigError for
        a file that cannot be read, or a certificate without its key."""
        if not self.ca:
            return None
        if bool(self.cert) != bool(self.key):
            raise ConfigError("tls_cert and tls_key go together: give both or neither")
        return grpc.ssl_channel_credentials(
            _read(self.ca, "cluster_ca"),
            _read(self.key, "tls_key") if self.key else None,
            _read(self.cert, "tls_cert") if self.cert else None,
        )


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ConfigError(f"{what} {path}: {e.strerror}") from None


_dialing = Dialing()


def use(dialing: Dialing) -> None:
    """This process's settings for the channels it opens to other boards."""
    global _dialing
    dialing.credentials()  # a bad file is refused now, not at the first dial
    _dialing = dialing


def dialing() -> Dialing:
    """The settings ``use`` gave (plaintext until then)."""
    return _dialing


def channel(target: str, credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A channel to the board at ``target`` (HOST:PORT): with
    ``credentials`` if given, else as this process's ``Dialing`` says."""
    credentials = credentials or _dialing.credentials()
    if credentials is None:
        return grpc.insecure_channel(target, OPTIONS)
    return grpc.secure_channel(target, credentials, OPTIONS)
