"""The fault tests' workload: clients of a board, each call recorded.

``Workload(history, address)`` runs, each in a thread of its own and
with a connection of its own, two unary posters, a streamed poster
(an idempotent ``Publisher``), a Subscribe MOVE consumer that acks each
delivery, a taker of leased messages that acks what it took, and a plain
taker. Every post carries a unique idempotency key, which is also its
body. Every call becomes one or more ``Op`` in the shared ``History``,
with the time it was invoked and the time it was answered
(``time.monotonic``) and its outcome: ``ok``, ``fail`` (it did nothing:
a standby refused it, or the board refused the input) or ``unknown`` (it
may have happened: the answer was lost, the board timed out, the
connection broke). tests/jepsen.py judges the history.

The kinds of ``Op``:

- ``post``: a post of ``key`` to ``queue`` (``seq``: its answer);
- ``deliver``: a consumer saw ``key``; the board gave it no earlier than
  ``invoked_at`` (a Take's call; for the Subscribe consumer, which has
  credit 1, the moment its credit last went back, or for a stream's first
  delivery the moment ``subscribe`` was called) and no later than
  ``done_at``;
- ``ack``: an ack of a delivery of ``key`` (Subscribe or leased take);
- ``take``: a plain take of ``key``: delivered and processed in one;
- ``blind``: a call that may have delivered messages of ``queue`` nobody
  saw (a take whose answer was lost, a Subscribe stream lost with
  deliveries on their way).

Bounded: ``run(seconds)`` or ``start()``/``stop()``; a call that hangs on
a black-holed connection is cut by closing its connection at ``stop``.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from msgboard.client import Client, Message, Publisher, Subscription
from msgboard.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    MsgboardError,
    NotFound,
    NotPrimary,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
)
from msgboard.spec import UNLIMITED

OK, FAIL, UNKNOWN = "ok", "fail", "unknown"

#: The queues of a workload: ``jobs`` is consumed, ``kept`` only posted to.
CONSUMED = "jobs"
KEPT = "kept"
QUEUES = (CONSUMED, KEPT)
#: The clients of a workload (``Workload(roles=...)`` runs some of them).
ROLES = ("poster0", "poster1", "streamer", "subscriber", "leaser", "taker")
#: The clients that only post.
POSTERS = ("poster0", "poster1", "streamer")

#: Errors that say the call did nothing (anything else may have happened).
_REFUSED = (
    NotPrimary,
    InvalidArgument,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    Unauthenticated,
    FailedPrecondition,
    ResourceExhausted,
)


@dataclass(frozen=True)
class Op:
    """One call of one client, or one delivery it saw."""

    client: str
    kind: str
    key: str
    queue: str
    invoked_at: float
    done_at: float
    outcome: str
    seq: int = 0
    #: What went wrong, for a call that failed (or whose answer was lost).
    error: str = ""


def outcome(e: BaseException) -> str:
    """``fail`` for an error that says nothing happened, else ``unknown``."""
    return FAIL if isinstance(e, _REFUSED) else UNKNOWN


class History:
    """Every op of a test, from every client, in the order recorded."""

    def __init__(self) -> None:
        self._ops: list[Op] = []
        self._lock = threading.Lock()

    def add(self, op: Op) -> None:
        with self._lock:
            self._ops.append(op)

    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def summary(self) -> dict[str, int]:
        """How many ops of each kind and outcome (``post ok``...)."""
        out: dict[str, int] = {}
        for o in self.ops():
            out[f"{o.kind} {o.outcome}"] = out.get(f"{o.kind} {o.outcome}", 0) + 1
        return dict(sorted(out.items()))

    def count(self, kind: str, outcome: str = OK, after: float = 0.0) -> int:
        """How many ``kind`` ops had ``outcome`` and were invoked after ``after``."""
        return sum(
            1
            for o in self.ops()
            if o.kind == kind and o.outcome == outcome and o.invoked_at > after
        )


def now() -> float:
    return time.monotonic()


def prepare(address: str, timeout: float = 60.0) -> None:
    """Creates the workload's queues (every taken message kept in history,
    so the final board shows each key posted), waiting for the board."""
    deadline = now() + timeout
    with Client(address, timeout=10) as c:
        while True:
            try:
                for q in QUEUES:
                    c.create_queue(q, max_history=UNLIMITED)
                return
            except MsgboardError:
                if now() > deadline:
                    raise
                time.sleep(0.2)


class Workload:
    """The clients above against ``address`` (``"a,b,c"`` with
    ``failover``: the Python client follows the primary among them, for up
    to ``failover`` seconds a call); their names start with ``name`` (a
    second workload on a new primary takes another). ``queues`` are the
    queues posted to (in turn), ``roles`` the clients run (all by default;
    the posters alone for a workload whose queue something else drains,
    as a link does: tests/linkboards.py), ``topic`` the address of every
    post, ``pause`` the seconds each poster waits between posts."""

    def __init__(
        self,
        history: History,
        address: str,
        *,
        name: str = "w",
        call_timeout: float = 10.0,
        batch: int = 10,
        failover: float | None = None,
        queues: Sequence[str] = QUEUES,
        roles: Sequence[str] = ROLES,
        topic: str = "",
        pause: float = 0.0,
    ) -> None:
        self.history = history
        self.address = address
        self.name = name
        self.queues = tuple(queues)
        self.roles = tuple(roles)
        self.topic = topic
        #: Seconds each poster waits between its posts (0: none).
        self.pause = pause
        self.call_timeout = call_timeout
        self.batch = batch
        self.failover = failover
        self._stopping = threading.Event()
        self._clients: list[Client] = []
        self._threads: list[threading.Thread] = []
        self._subs: list[object] = []
        self._lock = threading.Lock()

    # -- running ------------------------------------------------------------

    def start(self) -> Workload:
        jobs: list[tuple[str, Callable[[Client, str], None]]] = [
            ("poster0", self._poster),
            ("poster1", self._poster),
            ("streamer", self._streamer),
            ("subscriber", self._subscriber),
            ("leaser", self._leaser),
            ("taker", self._taker),
        ]
        assert set(self.roles) <= {r for r, _ in jobs}, self.roles
        for role, job in jobs:
            if role not in self.roles:
                continue
            client = Client(self.address, timeout=self.call_timeout, failover=self.failover)
            self._clients.append(client)
            t = threading.Thread(
                target=self._guard, args=(job, client, f"{self.name}-{role}"), daemon=True
            )
            self._threads.append(t)
            t.start()
        return self

    def stop(self, grace: float = 15.0) -> None:
        """Stops every client: each ends its call under way, or has it cut
        (its connection closed) after ``grace`` seconds."""
        self._stopping.set()
        with self._lock:
            subs = list(self._subs)
        for s in subs:
            s.end()  # type: ignore[attr-defined]
        deadline = now() + grace
        for t in self._threads:
            t.join(max(0.0, deadline - now()))
        for c in self._clients:
            c.close()
        for t in self._threads:
            t.join(30)
        hung = [t for t in self._threads if t.is_alive()]
        assert not hung, f"workload threads did not end: {hung}"

    def run(self, seconds: float) -> None:
        self.start()
        self._stopping.wait(seconds)
        self.stop()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _guard(self, job: Callable[[Client, str], None], client: Client, name: str) -> None:
        """Runs ``job``; a client whose connection was closed at stop ends quietly."""
        try:
            job(client, name)
        except (MsgboardError, ValueError):  # a closed channel
            if not self.stopping:
                raise

    def _pause(self, seconds: float = 0.1) -> None:
        self._stopping.wait(seconds)

    def _add(self, *args: object, **kw: object) -> None:
        self.history.add(Op(*args, **kw))  # type: ignore[arg-type]

    # -- the clients --------------------------------------------------------

    def _poster(self, c: Client, name: str) -> None:
        """Unary posts, alternating queues; a post whose answer was lost is
        sent again with its key until it is answered or the run stops."""
        for n in itertools.count():
            if self.stopping:
                return
            if n and self.pause:
                self._pause(self.pause)
            key = f"{name}-{n}"
            queue = self.queues[n % len(self.queues)]
            while True:
                t0 = now()
                try:
                    seq = c.post(queue, body=key.encode(), key=key, address=self.topic)
                except MsgboardError as e:
                    self._add(name, "post", key, queue, t0, now(), outcome(e), error=str(e))
                    if outcome(e) == FAIL or self.stopping:
                        break
                    self._pause(0.2)
                    continue
                self._add(name, "post", key, queue, t0, now(), OK, seq)
                break

    def _streamer(self, c: Client, name: str) -> None:
        """Batches over one PostStream (idempotent: a batch whose answer is
        lost is sent again with the same keys for a few seconds)."""
        pub: Publisher | None = None
        try:
            for n in itertools.count():
                if self.stopping:
                    return
                if n and self.pause:
                    self._pause(self.pause)
                if pub is None:
                    pub = c.publisher(idempotent=True, retry_for=3.0)
                keys = [f"{name}-{n}-{i}" for i in range(self.batch)]
                queue = self.queues[n % len(self.queues)]
                batch = [Message(body=k.encode(), key=k, address=self.topic) for k in keys]
                t0 = now()
                try:
                    seqs = pub.post_messages(queue, batch)
                except MsgboardError as e:
                    done = now()
                    for k in keys:
                        self._add(name, "post", k, queue, t0, done, outcome(e), error=str(e))
                    with contextlib.suppress(MsgboardError, ValueError):
                        pub.close()
                    pub = None
                    self._pause(0.2)
                    continue
                done = now()
                for k, seq in zip(keys, seqs, strict=True):
                    self._add(name, "post", k, queue, t0, done, OK, seq)
        finally:
            if pub is not None:
                with contextlib.suppress(MsgboardError, ValueError):
                    pub.close()

    def _subscriber(self, c: Client, name: str) -> None:
        """A session MOVE selector on ``jobs`` with credit 1, acking each
        delivery: the board sends the next only once the ack gave the
        credit back, which bounds when it sent it. The first delivery of a
        stream is bounded by the call that opened it: the board registers
        the consumer, and may send it a message, before ``subscribe``
        returns (a loaded machine may run this thread only much later)."""
        opened = [now()]

        def lost(e: MsgboardError | None) -> None:
            if e is not None:  # deliveries on their way may be lost
                self._add(name, "blind", "", CONSUMED, opened[0], now(), UNKNOWN)
                opened[0] = now()  # before the next stream is asked for

        while not self.stopping:
            since = opened[0] = now()  # before the board can deliver anything
            try:
                sub = c.subscribe(CONSUMED, credit=1, on_reconnect=lost)
            except MsgboardError:
                self._pause(0.2)
                continue
            with self._lock:
                self._subs.append(sub)
            acks = _AckWatch(sub, name, CONSUMED, self.history)
            try:
                for d in sub:
                    key = d.message.key or d.message.body.decode()
                    self._add(name, "deliver", key, CONSUMED, since, now(), OK)
                    since = now()
                    sub.ack(d)
                    acks.sent(d.id, key, since)
                    if self.stopping:
                        sub.end()
            except MsgboardError:
                self._add(name, "blind", "", CONSUMED, opened[0], now(), UNKNOWN)
            finally:
                with contextlib.suppress(MsgboardError, ValueError):
                    sub.close(wait=3.0)
                acks.close()
            self._pause(0.2)

    def _leaser(self, c: Client, name: str) -> None:
        """Leased takes of up to 3 from ``jobs``, each acked at once."""
        while not self.stopping:
            t0 = now()
            try:
                got = c.take_leased(CONSUMED, lease=60, max=3, timeout=0.5)
            except MsgboardError as e:
                self._add(name, "blind", "", CONSUMED, t0, now(), outcome(e))
                self._pause(0.2)
                continue
            t1 = now()
            keys = {d.id: d.message.key or d.message.body.decode() for d in got}
            for k in keys.values():
                self._add(name, "deliver", k, CONSUMED, t0, t1, OK)
            if not got:
                continue
            t2 = now()
            try:
                r = c.ack(CONSUMED, got)
            except MsgboardError as e:
                for k in keys.values():
                    self._add(name, "ack", k, CONSUMED, t2, now(), outcome(e))
                continue
            t3 = now()
            for i, k in keys.items():
                if i in r.ids:
                    self._add(name, "ack", k, CONSUMED, t2, t3, OK)
                else:
                    self._add(name, "ack", k, CONSUMED, t2, t3, outcome(r.rejected[i]))

    def _taker(self, c: Client, name: str) -> None:
        """Plain takes of up to 2 from ``jobs``."""
        while not self.stopping:
            t0 = now()
            try:
                got = c.take(CONSUMED, max=2, timeout=0.5)
            except MsgboardError as e:
                self._add(name, "blind", "", CONSUMED, t0, now(), outcome(e))
                self._pause(0.2)
                continue
            t1 = now()
            for m in got:
                self._add(name, "take", m.key or m.body.decode(), CONSUMED, t0, t1, OK)


def late(
    h: History, client: str, after: float, before: float = float("inf"), *, frozen: bool = False
) -> list[Op]:
    """The calls of clients named ``client``... answered OK between
    ``after`` and ``before``: posts, takes and acks, not what a Subscribe
    stream pushes (a delivery is no answer to a write; were it stale, the
    checker's rule c finds it delivered after an ack). ``frozen`` (the board
    was paused at ``after``): the calls *invoked* after ``after`` and
    answered OK, whatever they were, since an answer the board decided
    before its pause may leave its socket only after SIGCONT."""
    return [
        o
        for o in h.ops()
        if o.client.startswith(client)
        and o.outcome == OK
        and (after < o.invoked_at if frozen else after < o.done_at < before)
        and (frozen or not (o.kind == "deliver" and o.client.endswith("-subscriber")))
    ]


def erred(h: History, client: str, after: float, seconds: float = 90.0) -> None:
    """Waits until a call of clients named ``client``... invoked after
    ``after`` failed (or had its answer lost)."""
    deadline = now() + seconds
    while not any(
        o.client.startswith(client) and o.outcome != OK and o.invoked_at > after for o in h.ops()
    ):
        if now() > deadline:
            raise AssertionError(f"not within {seconds} s: a call of {client} failed")
        time.sleep(0.05)


def posted(ops: Sequence[Op], after: float = 0.0, before: float = float("inf")) -> list[Op]:
    """The OK posts invoked after ``after`` and answered before ``before``."""
    return [
        o
        for o in ops
        if o.kind == "post" and o.outcome == OK and o.invoked_at > after and o.done_at < before
    ]


class _AckWatch:
    """Records a Subscription's acks as the board confirms (or rejects)
    them: a thread looks at its ``acked`` and ``rejected`` every 10 ms, so
    an ack's ``done_at`` is within some milliseconds of its answer; at
    ``close`` the acks still unanswered are recorded as unknown."""

    def __init__(self, sub: Subscription, client: str, queue: str, history: History) -> None:
        self.sub, self.client, self.queue, self.history = sub, client, queue, history
        self._pending: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def sent(self, delivery: int, key: str, at: float) -> None:
        with self._lock:
            self._pending[delivery] = (key, at)

    def _watch(self) -> None:
        while not self._done.wait(0.01):
            self._look(last=False)

    def _look(self, last: bool) -> None:
        t = now()
        with self._lock:
            for i in list(self._pending):
                key, t0 = self._pending[i]
                if i in self.sub.acked:
                    result = OK
                elif (e := self.sub.rejected.get(i)) is not None:
                    result = outcome(e)
                elif last:
                    result = UNKNOWN
                else:
                    continue
                self.history.add(Op(self.client, "ack", key, self.queue, t0, t, result))
                del self._pending[i]

    def close(self) -> None:
        self._done.set()
        self._thread.join(10)
        self._look(last=True)
