"""Following the primary: ``Failover`` holds the boards a client was given
(``"a,b,c"``, a list, or ``$MSGBOARD_SERVER``), the one it talks to now and
a channel to each, and decides, after a failure, where to go next and
whether the call may be sent again.

Where to go:

- UNAVAILABLE with reason ``NotPrimary`` (a standby): to the primary it
  names (metadata ``primary``), at once;
- no connection at all, or UNAVAILABLE with reason ``NoLease`` (a primary
  unsure of its lease), or DEADLINE_EXCEEDED (a board that does not answer,
  a paused one perhaps): to the next address of the list, after a pause;
- any other UNAVAILABLE (the connection broke during the call, a write not
  yet on a standby, a call still running when its board stopped leading),
  or CANCELLED (a board stopped while it had calls): the same board
  again, after a pause (if it is gone, the next attempt finds no
  connection and moves on).

What is sent again, for up to ``seconds`` (the failover deadline, 30 s by
default) from the first failure, pausing ``FIRST_PAUSE`` doubling up to
``MOST_PAUSE`` (jittered) between attempts:

- a call refused before it ran (NotPrimary, NoLease, no connection): any
  call, since the board did nothing;
- after any other UNAVAILABLE or a CANCELLED, only the calls that change nothing twice
  (``again``): reads, a queue's creation (idempotent), and a Post whose
  messages all carry idempotency keys. A Take, an Ack, a selector's
  creation or a deletion whose answer was lost is not sent again: the
  caller gets the UNAVAILABLE, since the board may have done it.

With failover off (``seconds`` 0: one address and no ``failover=``), a call
is tried once and its error raised, as before.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from msgboard.client.wire import mapped
from msgboard.errors import DeadlineExceeded, InvalidArgument, MsgboardError, NotPrimary
from msgboard.tls import Connection
from msgboard.v1 import board_pb2_grpc as pb_grpc

#: Jitter of its own: a client never draws from (or moves) the application's
#: global random state, which threads of a client may touch at any time.
JITTER = random.Random()

T = TypeVar("T")

DEFAULT_SERVER = "127.0.0.1:7878"
#: Seconds a call keeps trying the boards after its first failure, when
#: failover is on (more than one address, or ``failover=`` given).
FAILOVER_FOR = 30.0
#: The first pause between attempts and the longest (seconds).
FIRST_PAUSE = 0.05
MOST_PAUSE = 1.0
#: The channel options of a client that follows the primary: gRPC waits
#: 1 s, then longer, before it tries a board it could not reach again, and
#: until then a call fails at once; a board that takes over (on the address
#: of one that was gone) is found within 1 s rather than up to 5.
FOLLOWING = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
#: The statuses of an outage, after which a call may be sent again (the
#: module's docstring says which and where).
OUTAGE = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")
#: gRPC's words for a call that never reached a board.
_NO_CONNECTION = ("failed to connect to all addresses", "DNS resolution failed")
#: Moves at once in a row, before pausing anyway (two standbys naming each other).
_MOST_AT_ONCE = 3


def addresses_of(server: str | Sequence[str] | None) -> list[str]:
    """The addresses of ``server``: ``"a,b,c"`` or a list of them; None:
    ``$MSGBOARD_SERVER`` (a list too), else 127.0.0.1:7878."""
    if server is None or server == "" or (not isinstance(server, str) and not server):
        server = os.environ.get("MSGBOARD_SERVER") or DEFAULT_SERVER
    parts = server.split(",") if isinstance(server, str) else list(server)
    out = [p.strip() for p in parts]
    if any(not p for p in out):
        raise InvalidArgument(
            f"server: an empty address in {server!r} (give HOST:PORT[,HOST:PORT...])"
        )
    return [with_port(p) for p in out]


#: The port of an address that names none: the board's, not gRPC's 443.
DEFAULT_PORT = 7878


def with_port(address: str) -> str:
    """``address`` with the board's port (7878) when it names a host alone
    (``127.0.0.1``, ``localhost``, ``[::1]``, ``::1``); a gRPC target with a
    scheme (``unix:/path``, ``dns:///host:7``) is left as it is."""
    if "/" in address or address.startswith("unix"):
        return address
    if address.startswith("["):  # [v6] or [v6]:port
        return address if "]:" in address else f"{address}:{DEFAULT_PORT}"
    if address.count(":") > 1:  # a bare IPv6 address
        return f"[{address}]:{DEFAULT_PORT}"
    return address if ":" in address else f"{address}:{DEFAULT_PORT}"


def refused(e: MsgboardError) -> bool:
    """The board refused the call before running it (NotPrimary, NoLease)
    or no board was reached: sending it again does nothing twice."""
    if isinstance(e, NotPrimary) or e.reason == "NoLease":
        return True
    text = str(e)
    return any(words in text for words in _NO_CONNECTION)


def pause(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt`` + 1, jittered."""
    most = min(MOST_PAUSE, FIRST_PAUSE * 2.0**attempt)
    return most / 2 + JITTER.uniform(0, most / 2)


class Failover:
    """The boards a client may talk to and the one it talks to now (see the
    module's docstring). Shared by a client's calls, its subscriptions and
    publishers, from any thread."""

    def __init__(
        self, connection: Connection, addresses: Sequence[str], seconds: float | None = None
    ) -> None:
        """``connection``: the credentials (its address is ignored);
        ``seconds``: the failover deadline (None: ``FAILOVER_FOR`` with more
        than one address, else 0, off)."""
        if not addresses:
            raise InvalidArgument("server: no address given")
        self.addresses = list(addresses)
        if seconds is None:
            seconds = FAILOVER_FOR if len(self.addresses) > 1 else 0.0
        if seconds < 0:
            raise InvalidArgument(f"failover: {seconds} seconds is below 0")
        self.seconds = seconds
        self.address = self.addresses[0]
        self._credentials = connection
        #: The listed address tried last (a primary named by a standby may
        #: be none of them): where "the next address" counts from.
        self._at = 0
        self._channels: dict[str, tuple[grpc.Channel, pb_grpc.BoardStub]] = {}
        self._lock = threading.Lock()
        for a in self.addresses:  # a token refused in plaintext: said now
            connection._replace(address=a).check()

    @property
    def on(self) -> bool:
        return self.seconds > 0

    def connection(self, address: str | None = None) -> Connection:
        """How to reach ``address`` (default: the current board)."""
        return self._credentials._replace(address=address or self.address)

    def channel(self) -> tuple[str, grpc.Channel, pb_grpc.BoardStub]:
        """The current board's address, channel and stub (one channel per
        board, kept until ``close``: streams on it live on)."""
        with self._lock:
            address = self.address
            if address not in self._channels:
                connection = self.connection(address)
                ch = connection.channel(FOLLOWING) if self.on else connection.channel()
                self._channels[address] = (ch, pb_grpc.BoardStub(ch))
            ch, stub = self._channels[address]
        return address, ch, stub

    def moved(self, address: str, e: MsgboardError) -> bool:
        """Takes note that ``address`` answered ``e`` and picks the board to
        try next; True when it is to be tried at once (a standby named
        its primary), False after a pause. Does nothing when off."""
        if not self.on:
            return False
        with self._lock:
            if self.address != address:
                return True  # another call moved already
            if address in self.addresses:
                self._at = self.addresses.index(address)
            if isinstance(e, NotPrimary) and e.primary and e.primary != address:
                self.address = e.primary
                return True
            if refused(e) or isinstance(e, DeadlineExceeded):
                self._at = (self._at + 1) % len(self.addresses)
                self.address = self.addresses[self._at]
            return False

    def run(self, call: Callable[[pb_grpc.BoardStub], T], *, again: bool) -> T:
        """``call`` on the current board's stub, tried again on the boards
        as the module's docstring says (``again``: also after an
        UNAVAILABLE that may have come after it ran)."""
        deadline = 0.0
        attempt = at_once = 0
        while True:
            address, _, stub = self.channel()
            try:
                with mapped():
                    return call(stub)
            except MsgboardError as e:
                if e.code not in OUTAGE or not self.on:
                    raise
                now_at_once = self.moved(address, e)
                if e.code == "DEADLINE_EXCEEDED" or not (again or refused(e)):
                    raise
                now = time.monotonic()
                deadline = deadline or now + self.seconds
                if now_at_once and at_once < _MOST_AT_ONCE:
                    wait = 0.0
                    at_once += 1
                else:
                    wait = pause(attempt)
                    attempt += 1
                    at_once = 0
                if now + wait > deadline:
                    raise
                time.sleep(wait)

    def unary(self, method: str, request: Any, *, timeout: float | None, again: bool) -> Any:
        """The unary ``method`` (a Board RPC's name) with ``request``."""
        return self.run(lambda stub: getattr(stub, method)(request, timeout=timeout), again=again)

    def close(self) -> None:
        with self._lock:
            channels, self._channels = self._channels, {}
        for ch, _ in channels.values():
            ch.close()


#: The unary calls that change nothing when sent twice: sent again after
#: any UNAVAILABLE (and a Post whose messages all carry keys). Every other
#: call is sent again only when it was refused before it ran.
AGAIN = frozenset(
    {
        "Browse",
        "CreateLink",  # idempotent for the same settings
        "CreateQueue",  # idempotent for the same properties
        "GetQueue",
        "GetSelector",
        "ListConsumers",
        "ListLeases",
        "ListLinks",
        "ListQueues",
        "ListSelectors",
        "Read",
        "Stats",
    }
)


class Calls:
    """The Board's unary calls through a ``Failover``, spelled as the stub's
    (``calls.Take(request, timeout=t)``), raising msgboard errors."""

    def __init__(self, failover: Failover) -> None:
        self._failover = failover

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def call(request: Any, timeout: float | None = None) -> Any:
            again = method in AGAIN or (method == "Post" and all(m.key for m in request.messages))
            return self._failover.unary(method, request, timeout=timeout, again=again)

        return call


def new_key() -> str:
    """An idempotency key for a message its poster did not key."""
    return uuid.uuid4().hex
