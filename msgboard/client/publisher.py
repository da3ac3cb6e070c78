"""Posting, as every poster does it (``Poster``: ``post``, ``post_messages``
over one ``post_receipts``), and ``Publisher``: one open PostStream with one
batch in flight, which ``Client.publisher`` opens.
"""

from __future__ import annotations

import abc
import builtins
import collections
import contextlib
import queue as queue_
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from msgboard import codec
from msgboard.client.wire import in_stream, mapped
from msgboard.errors import Unavailable
from msgboard.message import Message, Value
from msgboard.spec import Receipt
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc


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
    ) -> int:
        """Posts one message and returns its seq once it is durable."""
        m = Message(
            tuple=builtins.tuple(tuple),
            address=address,
            priority=priority,
            headers=dict(headers or {}),
            reply_to=reply_to,
            expires_at=expires_at,
            content_type=content_type,
            body=body.encode() if isinstance(body, str) else body,
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
        seq and what became of it (stored, overflowed, dead-lettered, dropped)."""


class Publisher(Poster):
    """One open PostStream, one batch in flight (see ``Client.publisher``).
    Not for several threads at once."""

    def __init__(self, stub: pb_grpc.BoardStub) -> None:
        self._requests: queue_.SimpleQueue[pb.PostStreamRequest | None] = queue_.SimpleQueue()
        call: Any = stub.PostStream(iter(self._requests.get, None))
        self._call = call
        self._batches = 0
        self._closed = False

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]:
        """Posts messages in one transaction; returns their receipts once durable."""
        if self._closed:
            raise Unavailable("the publisher is closed")
        self._batches += 1
        self._requests.put(
            pb.PostStreamRequest(
                batch_id=self._batches,
                queue=queue,
                messages=codec.messages_to_pb(messages),
            )
        )
        with mapped():
            r = next(self._call, None)
        if r is None:
            self._closed = True
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
