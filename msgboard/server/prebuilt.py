"""Big answers serialized in pieces, so that one answer never holds the GIL
for long.

gRPC serializes a servicer's answer with one ``SerializeToString`` call on
the event loop, the GIL held throughout: for ListQueues over 100,000
queues (3.3 MB; Stats is bigger) that is 20 to 100 ms on a loaded machine,
during which no other call moves, on the loop or on any thread (a Post's
p99 while another process lists every queue in a loop). A protobuf's
repeated field is, on the wire, its elements one after another, so the
answer can be serialized ``CHUNK`` elements at a time, on a worker thread,
the pieces joined (a copy, no parse): the GIL changes hands between pieces.
Those servicers return the joined bytes, and ``Prebuilt``, an interceptor,
has gRPC send bytes as they are (any other answer is serialized as before).
On a board with a users file, the guard reads a ListQueues answer back to
keep what the caller may see (``security/permissions.py``), and what it
keeps is serialized in one call again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from msgboard.v1 import board_pb2 as pb

T = TypeVar("T")

#: Elements serialized in one call (about 35 µs of GIL each, ListQueues).
CHUNK = 1000
#: The methods whose servicers answer with bytes.
METHODS = frozenset(
    f"/{pb.DESCRIPTOR.services_by_name['Board'].full_name}/{m}" for m in ("ListQueues", "Stats")
)


def pieces(head: Any, items: Sequence[T], fill: Callable[[Any, Sequence[T]], None]) -> bytes:
    """The bytes of ``head`` (a message with its other fields set) with its
    repeated field holding ``items``: ``fill(message, chunk)`` adds one
    chunk of them to an empty message of head's type."""
    out = [head.SerializeToString()]
    for i in range(0, len(items), CHUNK):
        m = type(head)()
        fill(m, items[i : i + CHUNK])
        out.append(m.SerializeToString())
    return b"".join(out)


def _passing(serialize: Callable[[Any], bytes] | None) -> Callable[[Any], bytes]:
    def serializer(answer: Any) -> bytes:
        if isinstance(answer, bytes):
            return answer
        assert serialize is not None
        return serialize(answer)

    return serializer


class Prebuilt(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Lets ``METHODS`` answer with bytes already serialized. Install it
    first (outermost), so that the handler it changes is the one run."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None or details.method not in METHODS:
            return handler
        return handler._replace(response_serializer=_passing(handler.response_serializer))
