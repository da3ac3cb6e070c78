"""Posting, as every poster does it (``Poster``: ``post``, ``post_messages``
over one ``post_receipts``), and ``Publisher``: one open PostStream with one
batch in flight, which ``Client.publisher`` opens.
"""

from __future__ import annotations

import abc
import builtins
import collections
import contextlib
import dataclasses
import queue as queue_
import time
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from msgboard import codec
from msgboard.client.failover import Failover, new_key, refused
from msgboard.client.wire import in_stream, mapped
from msgboard.errors import MsgboardError, Unavailable
from msgboard.message import Message, Value, now_us
from msgboard.spec import Receipt
from msgboard.v1 import board_pb2 as pb


class Poster(abc.ABC):
    """``post`` for whatever posts a batch of messages: a Client (one unary
    Post each) or a Publisher (one request of its open stream each)."""

    def post(
        self,
        queue: str,
        tuple: Sequence[Value] = (),
        *,
        address: str = "",
        headers: Mapping[str, str] | None = None,
        priority: int = 0,
        body: bytes | str = b"",
        content_type: str = "",
        reply_to: str = "",
        expires_at: int = 0,
        key: str = "",
        not_before: int = 0,
        delay: float = 0.0,
    ) -> int:
        """Posts one message and returns its seq once it is durable.
        ``key``: an idempotency key (at most 256 bytes): if the queue holds
        it (on the board, or within the queue's dedup window after), nothing
        is stored and the seq is the first message's. ``not_before`` (µs
        since the epoch) or ``delay`` (seconds from now): the message is
        stored at once but seen (taken, read, routed) only from then."""
        if delay:
            not_before = now_us() + round(delay * 1_000_000)
        m = Message(
            tuple=builtins.tuple(tuple),
            address=address,
            priority=priority,
            headers=dict(headers or {}),
            reply_to=reply_to,
            expires_at=expires_at,
            content_type=content_type,
            body=body.encode() if isinstance(body, str) else body,
            key=key,
            not_before=not_before,
        )
        return self.post_messages(queue, [m])[0]

    def post_messages(self, queue: str, messages: Sequence[Message]) -> list[int]:
        """Posts messages in one transaction; returns their seqs once durable
        (0 for one that found the queue full: ``post_receipts`` says where
        it went)."""
        return [r.seq for r in self.post_receipts(queue, messages)]

    @abc.abstractmethod
    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]:
        """Posts messages in one transaction; returns, once durable, each one's
        seq and what became of it (stored, overflowed, dead-lettered, dropped,
        or a duplicate of the message holding its key)."""


#: How long an idempotent Publisher retries a batch whose answer was lost
#: (seconds), and its first and longest pause between tries.
RETRY_FOR = 60.0
RETRY_FIRST = 0.1
RETRY_MOST = 2.0
#: Moves at once in a row to a board another named, before pausing anyway
#: (a primary handing over and its successor, not elected yet, name each other).
MOST_AT_ONCE = 3


class Publisher(Poster):
    """One open PostStream, one batch in flight (see ``Client.publisher``).
    Not for several threads at once.

    ``idempotent``: every message posted without a key gets one (a random
    UUID), and a batch whose answer is lost (the connection or the board
    went down: UNAVAILABLE, or CANCELLED) is sent again on a new stream,
    with the same keys, for up to ``retry_for`` seconds: the board stores
    what it had not and answers DUPLICATE, with the first seq, for what it
    had. The new stream goes where the client's ``Failover`` says (the
    primary a standby names, the next address after one that is gone); a
    batch refused before it ran (NotPrimary, NoLease, no connection) is sent
    again, idempotent or not, for up to the failover deadline (or
    ``retry_for``, if longer)."""

    def __init__(
        self, failover: Failover, *, idempotent: bool = False, retry_for: float = RETRY_FOR
    ) -> None:
        self._failover = failover
        self.idempotent = idempotent
        self.retry_for = retry_for
        self._batches = 0
        self._closed = False
        self._open()

    def _open(self) -> None:
        self._requests: queue_.SimpleQueue[pb.PostStreamRequest | None] = queue_.SimpleQueue()
        self._address, _, stub = self._failover.channel()
        # Without failover, an idempotent publisher waits for its one board
        # to come back; with it, a board gone is found at once and left.
        wait = self.idempotent and not self._failover.on
        call: Any = stub.PostStream(iter(self._requests.get, None), wait_for_ready=wait or None)
        self._call = call

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]:
        """Posts messages in one transaction; returns their receipts once durable."""
        if self._closed:
            raise Unavailable("the publisher is closed")
        if self.idempotent:
            messages = [m if m.key else dataclasses.replace(m, key=new_key()) for m in messages]
        pbs = codec.messages_to_pb(messages)
        start = time.monotonic()
        attempt = quick = 0
        while True:
            try:
                return self._send(queue, pbs)
            except MsgboardError as e:
                if not isinstance(e, Unavailable) and e.code != "CANCELLED":
                    raise  # CANCELLED: a board rebuilding its server, the answer lost
                at_once = self._failover.moved(self._address, e)
                # A batch refused before it ran (NotPrimary: a primary handing
                # over, or a standby) follows the primary for the failover
                # deadline; one whose answer was lost is resent for retry_for.
                follow = self._failover.on and refused(e)
                if not (self.idempotent or follow):
                    raise
                deadline = start + max(
                    self.retry_for if self.idempotent else 0.0,
                    self._failover.seconds if follow else 0.0,
                )
                at_once = at_once and quick < MOST_AT_ONCE  # two boards naming each other
                wait = 0.0 if at_once else min(RETRY_MOST, RETRY_FIRST * 2**attempt)
                if time.monotonic() + wait > deadline:
                    raise
                # The answer was lost, not the batch perhaps: the same keys again.
                time.sleep(wait)
                attempt, quick = (attempt, quick + 1) if at_once else (attempt + 1, 0)
                self._requests.put(None)
                self._closed = False
                self._open()

    def _send(self, queue: str, messages: list[pb.Message]) -> list[Receipt]:
        """One batch on the open stream, and its answer."""
        self._batches += 1
        self._requests.put(
            pb.PostStreamRequest(batch_id=self._batches, queue=queue, messages=messages)
        )
        with mapped():
            r = next(self._call, None)
        if r is None:
            self._closed = not self.idempotent
            raise Unavailable("the board ended the post stream")
        if r.HasField("error"):
            raise in_stream(r.error)
        return codec.receipts_from_pb(r.seqs, r.dispositions)

    def close(self) -> None:
        """Ends the stream (every post was already answered)."""
        if self._closed:
            return
        self._closed = True
        self._requests.put(None)
        with contextlib.suppress(grpc.RpcError):
            collections.deque(self._call, maxlen=0)  # to the stream's end
