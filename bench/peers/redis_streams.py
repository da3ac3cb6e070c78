"""Redis Streams' side of each workload, with redis-py.

Durability is the server's: an append-only file fsync'd ``always`` (before
the reply) or ``everysec``; see servers.Redis. ``port`` is a running
server's on 127.0.0.1, ``queue`` a fresh stream name. Each entry is one
field ``b`` with the 100-byte body (plus ``t``, the send time, for the
latency run and ``kind`` for the take-by-pattern run).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

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

GROUP = "g"


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=600)


def _fill(r: redis.Redis, stream: str, fields: list[dict[str, Any]]) -> None:
    """Pipelined XADDs, BATCH per round trip."""
    for k in range(0, len(fields), BATCH):
        pipe = r.pipeline(transaction=False)
        for f in fields[k : k + BATCH]:
            pipe.xadd(stream, f)
        pipe.execute()


def publish_one(port: int, queue: str, n: int) -> Figures:
    """1. XADD, one call at a time (with ``appendfsync always`` the reply
    comes after the fsync)."""
    r = _client(port)
    t = time.perf_counter()
    for _ in range(n):
        r.xadd(queue, {"b": BODY})
    out = rate(n, time.perf_counter() - t)
    r.delete(queue)
    r.close()
    return out


def publish_batch(port: int, queue: str, n: int) -> Figures:
    """2. Pipelined XADD (transaction=False), 100 per round trip."""
    r = _client(port)
    fields = [{"b": BODY}] * n
    t = time.perf_counter()
    _fill(r, queue, fields)
    out = rate(n, time.perf_counter() - t)
    if r.xlen(queue) != n:
        raise RuntimeError("entries missing")
    r.delete(queue)
    r.close()
    return out


def _ids(reply: Any) -> list[bytes]:
    """The entry ids of an XREADGROUP reply (one stream)."""
    return [i for _stream, entries in reply or () for i, _fields in entries]


def consume(port: int, queue: str, n: int, count: int = 100) -> Figures:
    """3. A consumer group on a stream of ``n`` (added beforehand, untimed):
    XREADGROUP COUNT 100, then XACK of those ids pipelined with the next
    XREADGROUP (one round trip per 100). Redis has no cumulative ack, so
    this is also its row for cumulative acks."""
    r = _client(port)
    _fill(r, queue, [{"b": BODY}] * n)
    r.xgroup_create(queue, GROUP, id="0")
    got = 0
    t = time.perf_counter()
    ids = _ids(r.xreadgroup(GROUP, "c", {queue: ">"}, count=count))
    while ids:
        got += len(ids)
        pipe = r.pipeline(transaction=False)
        pipe.xack(queue, GROUP, *ids)
        pipe.xreadgroup(GROUP, "c", {queue: ">"}, count=count)
        acked, reply = pipe.execute()
        if acked != len(ids):
            raise RuntimeError("XACK acked fewer")
        ids = _ids(reply)
    out = rate(got, time.perf_counter() - t)
    if got != n or r.xpending(queue, GROUP)["pending"]:
        raise RuntimeError(f"consumed {got} of {n}")
    r.delete(queue)
    r.close()
    return out


def _consumer(
    port: int,
    stream: str,
    group: str,
    n: int,
    done: Deliveries,
    ready: threading.Event,
    lat: list[float] | None = None,
) -> threading.Thread:
    """A thread with its own connection reading ``n`` entries through
    ``group``: XREADGROUP BLOCK COUNT 100, acking each batch (XACK pipelined
    with the next blocking read)."""

    def run() -> None:
        try:
            r = _client(port)
            ready.set()
            got = 0
            ids: list[bytes] = []
            while got < n:
                pipe = r.pipeline(transaction=False)
                if ids:
                    pipe.xack(stream, group, *ids)
                pipe.xreadgroup(group, "c", {stream: ">"}, count=100, block=1000)
                reply = pipe.execute()[-1]
                now = time.perf_counter()
                entries = [e for _s, es in reply or () for e in es]
                ids = [i for i, _f in entries]
                if lat is not None:
                    lat.extend(now - float(f[b"t"]) for _i, f in entries)
                got += len(ids)
                done.add(len(ids))
            r.xack(stream, group, *ids)
            r.close()
        except BaseException as e:
            done.fail(e)

    return threading.Thread(target=run, daemon=True)


def latency(port: int, queue: str, n: int, per_s: float) -> Figures:
    """4. A paced publisher (common.slots): whatever is due goes in one
    pipeline of XADDs (usually one; more if the last round trip ran past a
    slot), each entry stamped with its due time in field ``t``; one consumer
    with a blocking XREADGROUP (BLOCK, COUNT 100) acking each batch."""
    r = _client(port)
    r.xgroup_create(queue, GROUP, id="$", mkstream=True)
    lat: list[float] = []
    done = Deliveries(n)
    ready = threading.Event()
    t = _consumer(port, queue, GROUP, n, done, ready, lat)
    start_threads([t], [ready])
    start = time.perf_counter()
    for due in slots(per_s, n):
        pipe = r.pipeline(transaction=False)
        for stamp in due:
            pipe.xadd(queue, {"t": repr(stamp), "b": BODY})
        pipe.execute()
    seconds = time.perf_counter() - start
    done.wait()
    t.join()
    r.delete(queue)
    r.close()
    return latencies(lat, n, seconds)


def fanout(port: int, queue: str, n: int, subscribers: int = 10) -> Figures:
    """5. One stream, 10 consumer groups with one consumer thread each
    (blocking XREADGROUP COUNT 100, XACK of each batch); the publisher as
    in 2."""
    r = _client(port)
    groups = [f"g{k}" for k in range(subscribers)]
    for g in groups:
        r.xgroup_create(queue, g, id="$", mkstream=True)
    done = Deliveries(n * subscribers)
    ready = [threading.Event() for _ in groups]
    threads = [_consumer(port, queue, g, n, done, e) for g, e in zip(groups, ready, strict=True)]
    start_threads(threads, ready)
    t = time.perf_counter()
    _fill(r, queue, [{"b": BODY}] * n)
    done.wait()
    out = rate(done.count, done.last - t)
    for th in threads:
        th.join()
    r.delete(queue)
    r.close()
    return out


def take_pattern(port: int, queue: str, n: int, every: int = 100) -> Figures:
    """6. What a Redis user does: scan the stream with XRANGE, 1,000 entries
    per call, filter on field ``kind`` in the client and XDEL the matching
    ids of each page (one XDEL per page)."""
    kinds = {0: "hot", every // 2: "warm"}
    r = _client(port)
    _fill(r, queue, [{"kind": kinds.get(i % every, "cold"), "b": BODY} for i in range(n)])
    taken = 0
    lo = "-"
    t = time.perf_counter()
    while page := r.xrange(queue, min=lo, max="+", count=1000):
        hot = [i for i, f in page if f[b"kind"] == b"hot"]
        if hot:
            taken += r.xdel(queue, *hot)
        lo = "(" + page[-1][0].decode()
    seconds = time.perf_counter() - t
    left = r.xlen(queue)
    r.delete(queue)
    r.close()
    if taken != n // every or left != n - taken:
        raise RuntimeError(f"took {taken}, left {left}")
    return {"takes_per_s": taken / seconds, "matches": taken, "board": n, "left": left}


#: 3b. Redis has no cumulative ack: the same run as 3.
consume_cumulative = consume
