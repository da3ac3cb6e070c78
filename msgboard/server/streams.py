"""The two streaming calls, PostStream and Subscribe, and what they share
with the unary calls in ``service`` (selectors as protobufs). Errors
become statuses and in-stream ``Error`` answers in ``msgboard.details``.

PostStream reads batches ahead, bounded in bytes, so that concurrent batches
share a group commit, and answers them in request order. Subscribe hands the
writer thread's deliveries and answers to the event loop and sends them in
order; acks, nacks and credit are submitted without waiting for each commit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

import grpc

from msgboard import codec, probe
from msgboard.details import abort, error_to_pb
from msgboard.engine import Board
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.results import Acked, ConsumerView, SelectorView
from msgboard.security.auth import blame, caller
from msgboard.server.deliveries import deliveries_to_bytes
from msgboard.server.handoff import Handoff, wait
from msgboard.spec import Delivery, Op
from msgboard.v1 import board_pb2 as pb


def selector_to_pb(v: SelectorView) -> pb.Selector:
    return pb.Selector(
        id=v.id,
        spec=codec.selector_spec_to_pb(v.spec),
        durable=v.durable,
        attached=v.attached,
        outstanding=v.outstanding,
        delivered=v.delivered,
        dropped=v.dropped,
    )


def consumer_to_pb(v: ConsumerView) -> pb.ConsumerInfo:
    unlimited = v.credit == float("inf")
    p = pb.ConsumerInfo(
        id=v.id,
        peer=v.peer,
        identity=v.identity,
        queue=v.queue,
        selector_id=v.selector,
        op=pb.OPERATION_COPY if v.op == Op.COPY.value else pb.OPERATION_MOVE,
        credit=0 if unlimited else int(v.credit),
        unlimited_credit=unlimited,
        outstanding=v.outstanding,
        delivered=v.delivered,
    )
    codec.us_to_ts(v.since, p.since)
    return p


def deliveries_to_pb(batch: list[Delivery]) -> pb.SubscribeResponse:
    # Joined as bytes and parsed once, in C: cheaper than filling a protobuf
    # message per delivery (deliveries.py).
    return _parse_response(deliveries_to_bytes((d.id, d.message) for d in batch))


_parse_response = pb.SubscribeResponse.FromString


def rejected_to_pb(a: Acked) -> list[pb.RejectedAck]:
    """The ids an ack could not apply, with why (Acks and AckResponse)."""
    return [pb.RejectedAck(id=i, error=error_to_pb(e)) for i, e in a.rejected.items()]


def acked_to_pb(a: Acked) -> pb.Acks:
    return pb.Acks(ids=a.ids, rejected=rejected_to_pb(a))


async def post_stream(
    board: Board, request_iterator: AsyncIterator[pb.PostStreamRequest]
) -> AsyncIterator[pb.PostStreamResponse]:
    """PostStream: batches posted as they come, answered in request order."""
    # Read batches ahead while earlier ones commit, so that concurrent
    # batches share a group commit; answer them in request order. What
    # is read ahead is bounded in bytes (Limits.max_read_ahead_bytes): a
    # client sending flat out waits in gRPC's flow control, not in our
    # memory. One batch is always read, however large.
    handoff = Handoff.of(asyncio.get_running_loop())
    pending: asyncio.Queue[tuple[int, int, Any] | None] = asyncio.Queue()
    room = asyncio.Condition()
    ahead = 0
    cap = board.limits.max_read_ahead_bytes

    def has_room() -> bool:
        return ahead < cap

    async def read() -> None:
        nonlocal ahead
        try:
            it = aiter(request_iterator)
            while True:
                async with room:
                    await room.wait_for(has_room)
                req = await anext(it, None)
                if req is None:
                    break
                if probe.ON:
                    probe.mark("read")
                size, batch_id = req.ByteSize(), req.batch_id
                ahead += size
                answer: Any
                try:
                    msgs = codec.messages_from_pb(req.messages)
                    if probe.ON:
                        probe.mark("decoded")
                    fut = board.post_receipts_async(req.queue, msgs)
                    answer = handoff.wait(fut)
                except MsgboardError as e:
                    answer = e
                del req  # only its messages stay, until answered
                await pending.put((size, batch_id, answer))
        finally:
            await pending.put(None)

    reader = asyncio.create_task(read())
    try:
        while (item := await pending.get()) is not None:
            size, batch_id, answer = item
            try:
                if isinstance(answer, MsgboardError):
                    raise answer
                got = await answer
                if probe.ON:
                    probe.mark("wake")
                seqs, dispositions = codec.receipts_to_pb(got)
            except MsgboardError as e:
                r = pb.PostStreamResponse(batch_id=batch_id, error=error_to_pb(blame(e)))
            else:
                r = pb.PostStreamResponse(batch_id=batch_id, seqs=seqs, dispositions=dispositions)
            async with room:
                ahead -= size
                room.notify()
            if probe.ON:
                probe.mark("built")
            yield r
        await reader  # re-raises a failure to read the stream
    finally:
        reader.cancel()


async def subscribe(
    board: Board,
    request_iterator: AsyncIterator[pb.SubscribeRequest],
    context: grpc.aio.ServicerContext[Any, Any],
) -> AsyncIterator[pb.SubscribeResponse]:
    """Subscribe: the consumer's stream (see board.proto)."""
    handoff = Handoff.of(asyncio.get_running_loop())
    # What to send: delivery batches (lists) from the writer thread,
    # answers (responses) from the reader, and the end (``done``, or the
    # error that ended the subscription).
    out: collections.deque[Any] = collections.deque()
    ready = asyncio.Event()
    done = object()

    def push(item: Any) -> None:
        out.append(item)
        ready.set()

    def hand(item: Any) -> None:
        if probe.ON and isinstance(item, list):
            probe.mark("deliver", len(item))
        handoff.call(push, item)

    first = await anext(aiter(request_iterator), None)
    if first is None or first.WhichOneof("kind") != "open":
        await abort(context, InvalidArgument("open: the first request must be `open`"))
    o = first.open
    try:
        attach = bool(o.selector_id)
        consumer, view = await wait(
            board.subscribe_async(
                o.queue,
                codec.pattern_from_pb(o.pattern, "open.pattern") if o.HasField("pattern") else None,
                deliver=hand,
                end=lambda why: hand(done if why is None else why),
                op=codec.op_from_pb(o.op, "open.op") if not attach else Op.MOVE,
                credit=o.credit,
                start=codec.position_from_pb(o.start, "open.start"),
                start_seq=o.start_seq,
                start_time=(
                    codec.checked_ts(o.start_time, "open.start_time")
                    if o.HasField("start_time")
                    else 0
                ),
                selector_id=o.selector_id,
                peer=context.peer() or "",
                identity=caller.get(),
                redelivery=(
                    codec.redelivery_from_pb(o.redelivery, "open.redelivery")
                    if o.HasField("redelivery")
                    else None
                ),
            )
        )
    except MsgboardError as e:
        await abort(context, blame(e))
    # Each request is answered (an error, or `acked` for an ack) in the
    # order it came, with its ref: an answer waits for the one before it
    # (``tail``), whether that came from the writer thread or was an
    # error found here, before the writer saw the request.
    tail: Future[None] = Future()
    tail.set_result(None)

    def respond(fut: Future[Any], ref: int, confirm: bool) -> None:
        if fut.cancelled():
            return
        e = fut.exception()
        if isinstance(e, MsgboardError):
            hand(pb.SubscribeResponse(error=error_to_pb(e), ref=ref))
        elif e is None and confirm:
            hand(pb.SubscribeResponse(acked=acked_to_pb(fut.result()), ref=ref))

    def in_order(fut: Future[Any], ref: int, confirm: bool) -> None:
        nonlocal tail
        prev, mark = tail, Future[None]()
        tail = mark

        def emit(_: object) -> None:
            respond(fut, ref, confirm)
            mark.set_result(None)

        fut.add_done_callback(lambda _: prev.add_done_callback(emit))

    async def read() -> None:
        # Requests are submitted without waiting for each to commit, so
        # that a consumer acking every delivery shares group commits.
        async for req in request_iterator:
            kind = req.WhichOneof("kind")
            fut: Future[Any]
            try:
                if kind == "ack":
                    fut = board.ack_async(consumer, list(req.ack.ids), req.ack.up_to)
                elif kind == "nack":
                    n = req.nack
                    delay = (
                        codec.checked_duration(n.delay, "nack.delay")
                        if n.HasField("delay")
                        else None
                    )
                    fut = board.nack_async(consumer, list(n.ids), n.reject, delay)
                elif kind == "credit":
                    fut = board.add_credit_async(consumer, req.credit)
                else:
                    raise InvalidArgument(f"request: `{kind}` is not allowed after `open`")
            except MsgboardError as e:
                fut = Future()
                fut.set_exception(e)
            in_order(fut, req.ref, kind == "ack")
        # The client closed its side: its requests are answered first.
        tail.add_done_callback(lambda _: hand(done))

    def read_ended(t: asyncio.Task[None]) -> None:
        if not t.cancelled() and t.exception() is not None:
            push(done)  # a failure to read the stream ends it (re-raised below)

    reader = asyncio.create_task(read())
    reader.add_done_callback(read_ended)
    try:
        yield pb.SubscribeResponse(
            subscribed=selector_to_pb(view),
            credit=int(consumer.window),
            max_outstanding_bytes=int(consumer.max_bytes),
        )
        while True:
            await ready.wait()
            ready.clear()
            item = None
            while out:
                item = out.popleft()
                if isinstance(item, list):
                    while out and isinstance(out[0], list):
                        item += out.popleft()  # one response for what piled up
                    r = deliveries_to_pb(item)
                    if probe.ON:
                        probe.mark("dbuilt", len(item))
                    yield r
                elif isinstance(item, pb.SubscribeResponse):
                    yield item
                else:
                    break
            if isinstance(item, MsgboardError):
                await abort(context, item)
            if item is done:
                break
        if reader.done() and not reader.cancelled() and reader.exception() is not None:
            raise reader.exception()  # type: ignore[misc]
    finally:
        reader.cancel()
        with contextlib.suppress(MsgboardError):
            board.unsubscribe_async(consumer)
