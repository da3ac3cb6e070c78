"""``msgboard.server.rewrap``: a handler's behaviour, of each of the four
kinds, run inside an ``around`` context (what ``switchboard`` and
``decoding`` wrap every call with), over a real grpc.aio server on a
loopback port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from msgboard.server.rewrap import rewrap


def _bytes(b: bytes) -> bytes:
    return b


async def _unary(request: bytes, context: Any) -> bytes:
    return b"u:" + request


async def _gen(request: bytes, context: Any) -> AsyncIterator[bytes]:
    for part in (b"1", b"2"):
        yield request + part


async def _writes(request: bytes, context: Any) -> None:  # answers with context.write
    await context.write(request + b"w")


async def _collect(requests: AsyncIterator[bytes], context: Any) -> bytes:
    return b"+".join([r async for r in requests])


async def _echo(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for r in requests:
        yield r


def _handlers() -> dict[str, Any]:
    kw: dict[str, Any] = {"request_deserializer": _bytes, "response_serializer": _bytes}
    return {
        "UU": grpc.unary_unary_rpc_method_handler(_unary, **kw),
        "US": grpc.unary_stream_rpc_method_handler(_gen, **kw),
        "UW": grpc.unary_stream_rpc_method_handler(_writes, **kw),
        "SU": grpc.stream_unary_rpc_method_handler(_collect, **kw),
        "SS": grpc.stream_stream_rpc_method_handler(_echo, **kw),
    }


def test_each_kind_runs_inside_around_with_what_it_hands_on() -> None:
    """Given a handler of each kind (and a unary-stream that writes its
    answers), rewrapped with an around that upper-cases a unary request,
    wraps a stream's requests, and logs its enter and exit, I expect each
    call answered as the behaviour says from what around handed on, around
    entered and left once per call, and the deserializer replaced."""
    log: list[tuple[str, bool]] = []

    @asynccontextmanager
    async def around(streams_in: bool, request: Any, context: Any) -> AsyncIterator[Any]:
        log.append(("in", streams_in))
        try:
            if streams_in:

                async def upper() -> AsyncIterator[bytes]:
                    async for r in request:
                        yield r.upper()

                yield upper()
            else:
                yield request.upper()
        finally:
            log.append(("out", streams_in))

    def deserialize(b: bytes) -> bytes:
        return b + b"."

    async def run() -> list[Any]:
        server = grpc.aio.server()
        handlers = {
            k: rewrap(h, around, request_deserializer=deserialize) for k, h in _handlers().items()
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("T", handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                got: list[Any] = [await ch.unary_unary("/T/UU")(b"a", timeout=30)]
                got.append([r async for r in ch.unary_stream("/T/US")(b"b", timeout=30)])
                got.append([r async for r in ch.unary_stream("/T/UW")(b"c", timeout=30)])
                got.append(await ch.stream_unary("/T/SU")(iter([b"x", b"y"]), timeout=30))
                got.append(
                    [r async for r in ch.stream_stream("/T/SS")(iter([b"p", b"q"]), timeout=30)]
                )
                return got
        finally:
            await server.stop(None)

    got = asyncio.run(run())
    assert got == [
        b"u:A.",
        [b"B.1", b"B.2"],
        [b"C.w"],
        b"X.+Y.",
        [b"P.", b"Q."],
    ]
    kinds = [False, False, False, True, True]
    assert log == [x for s in kinds for x in (("in", s), ("out", s))]


def test_a_handler_without_a_behaviour_is_left_as_it_is() -> None:
    h = grpc.unary_unary_rpc_method_handler(None)  # type: ignore[arg-type]

    @asynccontextmanager
    async def around(streams_in: bool, request: Any, context: Any) -> AsyncIterator[Any]:
        yield request  # pragma: no cover

    assert rewrap(h, around) is h


@pytest.mark.parametrize("kind", ["UU", "US"])
def test_an_error_leaves_around_through_its_exit(kind: str) -> None:
    """Given a behaviour that raises, I expect around to see the error (and
    the call to fail with it as gRPC reports an error it did not expect)."""
    seen: list[BaseException] = []

    async def fails(request: bytes, context: Any) -> bytes:
        raise ValueError("no")

    async def fails_streaming(request: bytes, context: Any) -> AsyncIterator[bytes]:
        yield b"first"
        raise ValueError("no")

    @asynccontextmanager
    async def around(streams_in: bool, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            yield request
        except ValueError as e:
            seen.append(e)
            raise

    kw: dict[str, Any] = {"request_deserializer": _bytes, "response_serializer": _bytes}
    h = (
        grpc.unary_unary_rpc_method_handler(fails, **kw)
        if kind == "UU"
        else grpc.unary_stream_rpc_method_handler(fails_streaming, **kw)
    )

    async def run() -> grpc.StatusCode:
        server = grpc.aio.server()
        generic = grpc.method_handlers_generic_handler("T", {kind: rewrap(h, around)})
        server.add_generic_rpc_handlers((generic,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                try:
                    if kind == "UU":
                        await ch.unary_unary(f"/T/{kind}")(b"a", timeout=30)
                    else:
                        [_ async for _ in ch.unary_stream(f"/T/{kind}")(b"a", timeout=30)]
                except grpc.aio.AioRpcError as e:
                    return e.code()
                raise AssertionError("the call did not fail")
        finally:
            await server.stop(None)

    assert asyncio.run(run()) == grpc.StatusCode.UNKNOWN
    assert [str(e) for e in seen] == ["no"]
