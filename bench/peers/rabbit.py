"""RabbitMQ's side of each workload, with stock pika (1.x).

Durability as msgboard's: durable classic queues (durable exchange for the
fan-out; quorum queues instead with ``arguments=QUORUM``, in rows 1, 2, 3
and 5), persistent messages (delivery_mode=2) and publisher confirms (a
confirm for a persistent message to a durable queue comes once the broker
has it on disk, or once a consumer has acked it). ``port`` is a running
node's AMQP port on 127.0.0.1, ``queue`` a fresh name.

Publishers: one at a time, a BlockingConnection in confirm mode (its
``basic_publish`` returns once the broker confirmed); pipelined, a
SelectConnection (pika's asynchronous adapter) keeping up to 1,000
unconfirmed messages in flight, since the blocking adapter cannot leave
confirms outstanding. Consumers: a BlockingConnection with ``basic_qos``
and ``basic_consume``, each in its own thread where there are several.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import pika
from pika.spec import Basic

from peers.common import (
    BODY,
    WINDOW,
    Deliveries,
    Figures,
    latencies,
    rate,
    start_threads,
)

PERSISTENT = pika.BasicProperties(delivery_mode=2)
#: Queue arguments of rows 1, 2, 3 and 5 (bench/replication.py: ``QUORUM``);
#: None, a classic queue.
Arguments = dict[str, Any] | None
#: A quorum queue: a Raft group with a member on every node of the cluster
#: (``x-quorum-initial-group-size`` unset), fsync'd before a confirm.
QUORUM: dict[str, Any] = {"x-queue-type": "quorum"}


def _params(port: int) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", port, heartbeat=0, blocked_connection_timeout=600)


def _channel(port: int) -> tuple[pika.BlockingConnection, Any]:
    conn = pika.BlockingConnection(_params(port))
    return conn, conn.channel()


def _declare(port: int, *queues: str, exchange: str = "", arguments: Arguments = None) -> None:
    conn, ch = _channel(port)
    if exchange:
        ch.exchange_declare(exchange, exchange_type="fanout", durable=True)
    for q in queues:
        ch.queue_declare(q, durable=True, arguments=arguments)
        if exchange:
            ch.queue_bind(q, exchange)
    conn.close()


def _delete(port: int, *queues: str, exchange: str = "") -> None:
    conn, ch = _channel(port)
    for q in queues:
        ch.queue_delete(q)
    if exchange:
        ch.exchange_delete(exchange)
    conn.close()


def _depth(port: int, queue: str, expect: int = 0) -> int:
    """The queue's ready messages, once they are ``expect`` (requeues reach
    the queue asynchronously) or after 30 s."""
    conn, ch = _channel(port)
    deadline = time.monotonic() + 30
    while True:
        n: int = ch.queue_declare(queue, durable=True, passive=True).method.message_count
        if n == expect or time.monotonic() > deadline:
            conn.close()
            return n
        time.sleep(0.05)


def publish_async(
    port: int,
    exchange: str,
    key: str,
    n: int,
    *,
    window: int = WINDOW,
    per_s: float = 0.0,
    properties: Callable[[int], pika.BasicProperties] | None = None,
) -> float:
    """Publishes ``n`` persistent messages in confirm mode over a
    SelectConnection, with at most ``window`` unconfirmed, or, with
    ``per_s``, each at its slot of a fixed schedule (without waiting for
    confirms) and stamped with it (header ``t``, as common.slots does);
    returns the seconds from the first publish to the last confirm.
    ``properties(i)`` gives message i's properties (default: persistent)."""
    sent = 0
    pending: collections.deque[int] = collections.deque()  # unconfirmed tags, in order
    early: set[int] = set()  # confirmed singly, ahead of an older one
    start = end = 0.0
    error: list[str] = []
    channel: Any = None

    def on_open(conn: pika.SelectConnection) -> None:
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch: Any) -> None:
        nonlocal channel
        channel = ch
        ch.add_on_close_callback(lambda _ch, reason: end or fail(f"channel closed: {reason}"))
        ch.confirm_delivery(ack_nack_callback=on_confirm, callback=lambda _frame: begin())

    def begin() -> None:
        nonlocal start
        start = time.perf_counter()
        pump()

    def publish(due: float | None = None) -> None:
        nonlocal sent
        if due is not None:
            props = pika.BasicProperties(delivery_mode=2, headers={"t": repr(due)})
        else:
            props = properties(sent) if properties else PERSISTENT
        channel.basic_publish(exchange, key, BODY, props)
        sent += 1
        pending.append(sent)  # delivery tags count from 1

    def pump() -> None:
        if per_s:
            due = min(n, int((time.perf_counter() - start) * per_s) + 1)
            while sent < due:
                publish(start + sent / per_s)
            if sent < n:
                wait = start + sent / per_s - time.perf_counter()
                conn.ioloop.call_later(max(0.0, wait), pump)
        else:
            while sent < n and len(pending) < window:
                publish()

    def on_confirm(frame: Any) -> None:
        nonlocal end
        m = frame.method
        if isinstance(m, Basic.Nack):
            fail(f"the broker nacked message {m.delivery_tag}")
            return
        if m.multiple:
            while pending and pending[0] <= m.delivery_tag:
                pending.popleft()
        else:
            early.add(m.delivery_tag)
        while pending and pending[0] in early:
            early.discard(pending.popleft())
        if sent == n and not pending:
            end = time.perf_counter()
            conn.close()
        elif not per_s:
            pump()

    def fail(why: str) -> None:
        if not error:
            error.append(why)
        if conn.is_open:
            conn.close()

    def on_open_error(_conn: Any, e: Any) -> None:
        error.append(f"cannot connect: {e!r}")
        conn.ioloop.stop()

    conn = pika.SelectConnection(
        _params(port),
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=lambda _conn, _reason: conn.ioloop.stop(),
    )
    conn.ioloop.start()
    if error or not end:
        raise RuntimeError(error[0] if error else "the publisher stopped early")
    return end - start


def publish_one(port: int, queue: str, n: int, arguments: Arguments = None) -> Figures:
    """1. BlockingConnection in confirm mode: each ``basic_publish`` waits
    for the broker's confirm."""
    _declare(port, queue, arguments=arguments)
    conn, ch = _channel(port)
    ch.confirm_delivery()
    t = time.perf_counter()
    for _ in range(n):
        ch.basic_publish("", queue, BODY, PERSISTENT)
    out = rate(n, time.perf_counter() - t)
    conn.close()
    _delete(port, queue)
    return out


def publish_batch(port: int, queue: str, n: int, arguments: Arguments = None) -> Figures:
    """2. Asynchronous confirms (SelectConnection), 1,000 unconfirmed at most;
    the time ends at the last confirm."""
    _declare(port, queue, arguments=arguments)
    out = rate(n, publish_async(port, "", queue, n))
    _delete(port, queue)
    return out


def consume(
    port: int, queue: str, n: int, prefetch: int = 100, arguments: Arguments = None
) -> Figures:
    """3. basic_qos(prefetch_count=100) and basic_consume on a queue of ``n``
    (published beforehand, untimed), ``basic_ack`` of each message; the time
    ends when the consumer is cancelled (after the last ack, on the same
    channel)."""
    return _consume(port, queue, n, prefetch, 1, arguments)


def consume_cumulative(port: int, queue: str, n: int, prefetch: int = 100) -> Figures:
    """3b. As ``consume``, acking with multiple=True every prefetch/2."""
    return _consume(port, queue, n, prefetch, prefetch // 2)


def _consume(
    port: int, queue: str, n: int, prefetch: int, every: int, arguments: Arguments = None
) -> Figures:
    _declare(port, queue, arguments=arguments)
    publish_async(port, "", queue, n)
    conn, ch = _channel(port)
    ch.basic_qos(prefetch_count=prefetch)
    got = 0

    def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
        nonlocal got
        got += 1
        if every == 1:
            ch.basic_ack(method.delivery_tag)
        elif got % every == 0 or got == n:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got == n:
            ch.stop_consuming()

    t = time.perf_counter()
    ch.basic_consume(queue, on_message)
    ch.start_consuming()
    out = rate(got, time.perf_counter() - t)
    conn.close()
    if _depth(port, queue):
        raise RuntimeError("messages left unacked")
    _delete(port, queue)
    return out


def _consumer(
    port: int,
    queue: str,
    n: int,
    done: Deliveries,
    ready: threading.Event,
    on_props: Callable[[Any], None] | None = None,
) -> threading.Thread:
    """A thread consuming ``n`` messages from ``queue`` on its own
    connection: prefetch 100, basic_ack(multiple=True) every 50 (and of the
    last)."""

    def run() -> None:
        try:
            conn, ch = _channel(port)
            ch.basic_qos(prefetch_count=100)
            got = 0

            def on_message(ch: Any, method: Any, props: Any, _body: bytes) -> None:
                nonlocal got
                if on_props is not None:
                    on_props(props)
                done.add()
                got += 1
                if got % 50 == 0 or got == n:
                    ch.basic_ack(method.delivery_tag, multiple=True)
                if got == n:
                    ch.stop_consuming()

            ch.basic_consume(queue, on_message)
            ready.set()
            ch.start_consuming()
            conn.close()
        except BaseException as e:
            done.fail(e)

    return threading.Thread(target=run, daemon=True)


def latency(port: int, queue: str, n: int, per_s: float) -> Figures:
    """4. A paced publisher (``publish_async`` with ``per_s``: each message
    published at its slot, stamped with it, confirms coming back
    asynchronously); one consumer thread (prefetch 100, acks every 50)."""
    _declare(port, queue)
    lat: list[float] = []
    done = Deliveries(n)
    ready = threading.Event()

    def on_props(props: Any) -> None:
        lat.append(time.perf_counter() - float(props.headers["t"]))

    t = _consumer(port, queue, n, done, ready, on_props)
    start_threads([t], [ready])
    seconds = publish_async(port, "", queue, n, per_s=per_s)
    done.wait()
    t.join()
    _delete(port, queue)
    return latencies(lat, n, seconds)


def fanout(
    port: int, queue: str, n: int, subscribers: int = 10, arguments: Arguments = None
) -> Figures:
    """5. A durable fanout exchange bound to 10 durable queues, one consumer
    thread on each (prefetch 100, acks every 50); the publisher as in 2."""
    queues = [f"{queue}-{k}" for k in range(subscribers)]
    _declare(port, *queues, exchange=queue, arguments=arguments)
    done = Deliveries(n * subscribers)
    ready = [threading.Event() for _ in queues]
    threads = [_consumer(port, q, n, done, e) for q, e in zip(queues, ready, strict=True)]
    start_threads(threads, ready)
    t = time.perf_counter()
    publish_async(port, queue, "", n)
    done.wait()
    out = rate(done.count, done.last - t)
    for th in threads:
        th.join()
    _delete(port, *queues, exchange=queue)
    return out


def take_pattern(port: int, queue: str, n: int, every: int = 100) -> Figures:
    """6. What a RabbitMQ user does to take the 1% that match: one consumer
    with no prefetch limit reads the whole queue (kind in a header), acks the
    matching ones and, once it has seen all, requeues the rest with one
    basic_nack(multiple=True, requeue=True) (they keep their order)."""
    kinds = {0: "hot", every // 2: "warm"}
    props = {
        k: pika.BasicProperties(delivery_mode=2, headers={"kind": kinds.get(k, "cold")})
        for k in range(every)
    }
    _declare(port, queue)
    publish_async(port, "", queue, n, properties=lambda i: props[i % every])
    conn, ch = _channel(port)
    ch.basic_qos(prefetch_count=0)
    seen = taken = 0
    last_other = 0

    def on_message(ch: Any, method: Any, props: Any, _body: bytes) -> None:
        nonlocal seen, taken, last_other
        seen += 1
        if props.headers["kind"] == "hot":
            ch.basic_ack(method.delivery_tag)
            taken += 1
        else:
            last_other = method.delivery_tag
        if seen == n:
            ch.basic_nack(last_other, multiple=True, requeue=True)
            ch.stop_consuming()

    t = time.perf_counter()
    ch.basic_consume(queue, on_message)
    ch.start_consuming()
    seconds = time.perf_counter() - t
    conn.close()
    left = _depth(port, queue, n - taken)
    _delete(port, queue)
    if taken != n // every or left != n - taken:
        raise RuntimeError(f"took {taken}, left {left}")
    return {"takes_per_s": taken / seconds, "matches": taken, "board": n, "left": left}
