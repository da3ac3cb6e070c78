"""The Switchboard: one server whose calls go to the pipeline of the
board's role, so that a change of role cancels no call unseen (a stopped
server cancels what it received and had not begun: the switchover test's
CANCELLED under load) and the port is never bound again."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2 as hpb
from grpc_health.v1 import health_pb2_grpc as hpb_grpc

from msgboard.server.switchboard import STOPPED, Pipeline, Switchboard

SERVING, NOT_SERVING = hpb.HealthCheckResponse.SERVING, hpb.HealthCheckResponse.NOT_SERVING


class Answering(hpb_grpc.HealthServicer):
    """Check answers ``status``; with ``hold`` set, it first waits for it
    (a call in progress); Watch streams ``status`` until told to stop."""

    def __init__(self, status: int, hold: asyncio.Event | None = None) -> None:
        self.status, self.hold = status, hold
        self.started = asyncio.Event()

    async def Check(self, request: Any, context: Any) -> Any:
        self.started.set()
        if self.hold is not None:
            await self.hold.wait()
        return hpb.HealthCheckResponse(status=self.status)

    async def Watch(self, request: Any, context: Any) -> Any:
        self.started.set()
        while True:
            yield hpb.HealthCheckResponse(status=self.status)
            await asyncio.sleep(0.05)


def pipeline(servicer: hpb_grpc.HealthServicer) -> Pipeline:
    p = Pipeline()
    server: Any = p
    hpb_grpc.add_HealthServicer_to_server(servicer, server)
    return p


async def serving(board: Switchboard) -> tuple[grpc.aio.Server, grpc.aio.Channel]:
    server = grpc.aio.server(interceptors=[board])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, grpc.aio.insecure_channel(f"127.0.0.1:{port}")


def test_calls_during_many_switches_are_all_answered() -> None:
    """Given a server on a switchboard and eight clients calling flat out,
    when I switch between two pipelines 200 times, I expect every call
    answered by one of them (no CANCELLED, no UNAVAILABLE), both seen."""

    async def run() -> tuple[dict[int, int], list[str]]:
        a, b = pipeline(Answering(SERVING)), pipeline(Answering(NOT_SERVING))
        board = Switchboard(a)
        server, channel = await serving(board)
        stub = hpb_grpc.HealthStub(channel)
        seen: dict[int, int] = {}
        errors: list[str] = []
        done = asyncio.Event()

        async def client() -> None:
            while not done.is_set():
                try:
                    r = await stub.Check(hpb.HealthCheckRequest(), timeout=30)
                    seen[r.status] = seen.get(r.status, 0) + 1
                except grpc.aio.AioRpcError as e:
                    errors.append(f"{e.code().name}: {e.details()}")

        clients = [asyncio.create_task(client()) for _ in range(8)]
        for i in range(200):
            board.use(b if i % 2 == 0 else a)
            await asyncio.sleep(0.005)
        done.set()
        await asyncio.gather(*clients)
        await channel.close()
        await server.stop(None)
        return seen, errors

    seen, errors = asyncio.run(run())
    assert errors == []
    assert seen.get(SERVING, 0) > 0 and seen.get(NOT_SERVING, 0) > 0


def test_a_drained_pipeline_lets_its_calls_finish_within_the_grace() -> None:
    """Given a call in progress on pipeline A, when the board switches to B
    and drains A with a grace the call fits in, I expect the call answered
    by A, and new calls by B."""

    async def run() -> tuple[int, int]:
        hold = asyncio.Event()
        slow = Answering(SERVING, hold)
        a, b = pipeline(slow), pipeline(Answering(NOT_SERVING))
        board = Switchboard(a)
        server, channel = await serving(board)
        stub = hpb_grpc.HealthStub(channel)
        call = asyncio.ensure_future(stub.Check(hpb.HealthCheckRequest(), timeout=30))
        await slow.started.wait()
        old = board.use(b)
        assert old is a
        draining = asyncio.create_task(old.drain(30))
        after = await stub.Check(hpb.HealthCheckRequest(), timeout=30)
        hold.set()
        first = await call
        await draining
        await channel.close()
        await server.stop(None)
        return first.status, after.status

    assert asyncio.run(run()) == (SERVING, NOT_SERVING)


def test_what_outlasts_the_grace_ends_unavailable_at_once() -> None:
    """Given a unary call that never finishes and an open stream on A, when
    A is drained with a short grace, I expect both to end UNAVAILABLE
    saying the board stopped leading (not to hang until their deadline),
    and the drain to return."""

    async def run() -> list[tuple[str, str]]:
        stuck = Answering(SERVING, asyncio.Event())
        a = pipeline(stuck)
        board = Switchboard(a)
        server, channel = await serving(board)
        stub = hpb_grpc.HealthStub(channel)
        call = asyncio.ensure_future(stub.Check(hpb.HealthCheckRequest(), timeout=60))
        await stuck.started.wait()
        stream = stub.Watch(hpb.HealthCheckRequest(), timeout=60)
        await stream.read()
        board.use(pipeline(Answering(NOT_SERVING)))
        await asyncio.wait_for(a.drain(0.2), 30)
        ended = []

        async def to_the_end() -> None:
            while await stream.read() is not grpc.aio.EOF:
                pass  # what was sent before the drain

        for waiting in (call, to_the_end()):
            try:
                await asyncio.wait_for(waiting, 30)
            except grpc.aio.AioRpcError as e:
                ended.append((e.code().name, e.details() or ""))
        await channel.close()
        await server.stop(None)
        return ended

    assert asyncio.run(run()) == [("UNAVAILABLE", STOPPED)] * 2
