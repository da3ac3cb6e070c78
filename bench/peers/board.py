"""msgboard's side of each workload, through the public client only.

One function per workload; ``address`` is a running board's (the default
durable one: every acknowledged post is fsync'd), ``queue`` a fresh queue
name. Swap in faster client calls here; the peers' modules do not depend on
this one.
"""

from __future__ import annotations

import threading
import time

from msgboard import Message
from msgboard.client import Client, Subscription
from peers.common import (
    BATCH,
    BODY,
    Deliveries,
    Figures,
    latencies,
    rate,
    slots,
    start_threads,
)

#: Client-side deadline of unary calls; nothing here should come near it.
TIMEOUT = 600.0
#: Consumers of rows 4 and 5 ack cumulatively this often (half their credit
#: of 100), as the peers' do (RabbitMQ multiple=True, Redis per batch).
ACK_EVERY = 50


def _messages(n: int, keyed: bool = False) -> list[Message]:
    """Body-only messages, as the peers send: no tuple, no address; keyed,
    each with its own idempotency key (rows 1k and 2k)."""
    if keyed:
        return [Message(body=BODY, key=f"k{i}") for i in range(n)]
    return [Message(body=BODY) for _ in range(n)]


def publish_one(address: str, queue: str, n: int, keyed: bool = False) -> Figures:
    """1. ``Client.publisher``: one open PostStream, one message per
    request, each durable before the next is sent (as a RabbitMQ channel
    waiting for each confirm)."""
    with Client(address, timeout=TIMEOUT) as c:
        c.create_queue(queue)
        with c.publisher() as pub:
            t = time.perf_counter()
            for i in range(n):
                pub.post(queue, body=BODY, key=f"k{i}" if keyed else "")
            out = rate(n, time.perf_counter() - t)
        c.delete_queue(queue)
    return out


def publish_one_keyed(address: str, queue: str, n: int) -> Figures:
    """1k. As 1, each message with its own idempotency key."""
    return publish_one(address, queue, n, keyed=True)


def publish_one_unary(address: str, queue: str, n: int) -> Figures:
    """1b. ``Client.post``: one unary Post per message, each durable before
    the next is sent."""
    with Client(address, timeout=TIMEOUT) as c:
        c.create_queue(queue)
        t = time.perf_counter()
        for _ in range(n):
            c.post(queue, body=BODY)
        out = rate(n, time.perf_counter() - t)
        c.delete_queue(queue)
    return out


def publish_batch(address: str, queue: str, n: int, keyed: bool = False) -> Figures:
    """2. ``Client.post_many``: one PostStream, 100 messages per request,
    requests pipelined; returns when every batch is durable."""
    msgs = _messages(n, keyed)
    with Client(address, timeout=TIMEOUT) as c:
        c.create_queue(queue)
        t = time.perf_counter()
        seqs = c.post_many(queue, msgs, batch=BATCH)
        out = rate(len(seqs), time.perf_counter() - t)
        c.delete_queue(queue)
    return out


def publish_batch_keyed(address: str, queue: str, n: int) -> Figures:
    """2k. As 2, each message with its own idempotency key."""
    return publish_batch(address, queue, n, keyed=True)


def _drain(sub: Subscription, n: int, cumulative_every: int) -> None:
    for got, d in enumerate(sub, 1):
        if not cumulative_every:
            sub.ack(d)
        elif got % cumulative_every == 0 or got == n:
            sub.ack(up_to=d)
        if got == n:
            return


def consume(address: str, queue: str, n: int, credit: int = 100) -> Figures:
    """3. One MOVE subscription with credit 100 drains a queue of ``n``
    (posted beforehand, untimed), acking each delivery with its own ack;
    the time ends when the board has applied every ack (the subscription's
    close waits for it)."""
    return _consume(address, queue, n, credit, 0)


def consume_cumulative(address: str, queue: str, n: int, credit: int = 100) -> Figures:
    """3b. As ``consume``, acking cumulatively (``ack(up_to=d)``) every
    credit/2 deliveries."""
    return _consume(address, queue, n, credit, credit // 2)


def _consume(address: str, queue: str, n: int, credit: int, every: int) -> Figures:
    with Client(address, timeout=TIMEOUT) as c:
        c.create_queue(queue)
        c.post_many(queue, _messages(n), batch=BATCH)
        t = time.perf_counter()
        with c.subscribe(queue, credit=credit) as sub:
            _drain(sub, n, every)
        out = rate(n, time.perf_counter() - t)
        if c.get_queue(queue).unprocessed:
            raise RuntimeError("messages left unacked")
        c.delete_queue(queue)
    return out


def latency(address: str, queue: str, n: int, per_s: float) -> Figures:
    """4. Post -> delivery at a fixed rate. A paced publisher (common.slots):
    whatever is due goes in one ``Publisher.post_messages`` call (usually one
    message; more if the last call ran past a slot), each stamped with its
    due time in a header; one MOVE subscriber (credit 100) acking
    cumulatively every 50."""
    lat: list[float] = []
    with Client(address, timeout=TIMEOUT) as c:
        c.create_queue(queue)
        threads, ready, done = _subscribers(address, [queue], n, copy=False, credit=100, lat=lat)
        start_threads(threads, ready)
        with c.publisher() as pub:
            start = time.perf_counter()
            for due in slots(per_s, n):
                pub.post_messages(
                    queue, [Message(body=BODY, headers={"t": repr(stamp)}) for stamp in due]
                )
            seconds = time.perf_counter() - start
        done.wait()
        threads[0].join()
        c.delete_queue(queue)
    return latencies(lat, n, seconds)


def _subscribers(
    address: str,
    queues: list[str],
    n: int,
    *,
    copy: bool,
    credit: int,
    lat: list[float] | None = None,
) -> tuple[list[threading.Thread], list[threading.Event], Deliveries]:
    """One consumer thread per queue (its own client) taking ``n``
    deliveries, acking cumulatively every ACK_EVERY (and the last); with
    ``lat``, noting each one's latency from its header ``t``."""
    done = Deliveries(n * len(queues))
    ready = [threading.Event() for _ in queues]

    def consumer(q: str, ready: threading.Event) -> None:
        try:
            with (
                Client(address, timeout=TIMEOUT) as c,
                c.subscribe(q, copy=copy, credit=credit) as sub,
            ):
                ready.set()
                for got, d in enumerate(sub, 1):
                    if lat is not None:
                        lat.append(time.perf_counter() - float(d.message.headers["t"]))
                    done.add()
                    if got % ACK_EVERY == 0 or got == n:
                        sub.ack(up_to=d)
                    if got == n:
                        return
        except BaseException as e:
            done.fail(e)

    threads = [
        threading.Thread(target=consumer, args=(q, e), daemon=True)
        for q, e in zip(queues, ready, strict=True)
    ]
    return threads, ready, done


def _fan(
    c: Client,
    queue: str,
    n: int,
    subscribers: tuple[list[threading.Thread], list[threading.Event], Deliveries],
) -> Figures:
    """Starts the subscribers, posts ``n`` (post_many, batches of 100) and
    gives the deliveries/s from the first post to the last delivery."""
    threads, ready, done = subscribers
    start_threads(threads, ready)
    t = time.perf_counter()
    c.post_many(queue, _messages(n), batch=BATCH)
    done.wait()
    for th in threads:
        th.join()
    return rate(done.count, done.last - t)


def fanout(address: str, queue: str, n: int, subscribers: int = 10) -> Figures:
    """5. One publisher (post_many, batches of 100) to one queue with 10
    COPY subscriptions, each acking every 50 deliveries. A COPY subscriber's
    copies are not queued for it: one that finds no credit is dropped, so
    each gets credit for all ``n`` (with less, a fast publisher loses
    copies; the queue has ``unmatched: discard`` so that the originals do
    not pile up). Deliveries/s over all subscribers, first post to last
    delivery."""
    with Client(address, timeout=TIMEOUT) as c:
        c.create_queue(queue, unmatched="discard")
        subs = _subscribers(address, [queue] * subscribers, n, copy=True, credit=n)
        out = _fan(c, queue, n, subs)
        out["dropped"] = sum(q.dropped for q in c.stats(queue).queues)
        c.delete_queue(queue)
    return out


def fanout_queues(address: str, queue: str, n: int, subscribers: int = 10) -> Figures:
    """5b. The shape of a RabbitMQ fanout exchange: 10 COPY selectors from
    the published queue into 10 durable queues, one MOVE subscriber (credit
    100) on each, acking every 50 deliveries."""
    targets = [f"{queue}-{k}" for k in range(subscribers)]
    with Client(address, timeout=TIMEOUT) as c:
        c.create_queue(queue, unmatched="discard")
        for q in targets:
            c.create_queue(q)
            c.create_selector(queue, op="copy", to=q)
        out = _fan(c, queue, n, _subscribers(address, targets, n, copy=False, credit=100))
        for q in [queue, *targets]:
            c.delete_queue(q)
    return out


def take_pattern(address: str, queue: str, n: int, every: int = 100) -> Figures:
    """6. A queue of ``n`` tuples ("job", i, kind) where one in ``every`` is
    kind "hot" and another one in ``every`` is "warm" (posted beforehand,
    untimed). Timed: taking every "hot" one with ``take(("job", int,
    "hot"))``, one per call, then every "warm" one with max=100 per call."""
    kinds = {0: "hot", every // 2: "warm"}
    msgs = [Message(tuple=("job", i, kinds.get(i % every, "cold")), body=BODY) for i in range(n)]
    want = n // every
    with Client(address, timeout=TIMEOUT) as c:
        c.create_queue(queue)
        c.post_many(queue, msgs, batch=BATCH)
        t = time.perf_counter()
        for _ in range(want):
            if not c.take(queue, ("job", int, "hot")):
                raise RuntimeError("a hot one is missing")
        one = time.perf_counter() - t
        t = time.perf_counter()
        got = 0
        while batch := c.take(queue, ("job", int, "warm"), max=100):
            got += len(batch)
        hundred = time.perf_counter() - t
        if got != want:
            raise RuntimeError(f"took {got} warm ones, not {want}")
        left = c.get_queue(queue).unprocessed
        c.delete_queue(queue)
    return {
        "takes_per_s": want / one,
        "takes_100_per_s": want / hundred,
        "matches": want,
        "board": n,
        "left": left,
    }
