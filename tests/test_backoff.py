"""Redelivery backoff: a queue's (or a Subscribe's) policy delays each
message given back (nacked, its consumer gone) by its next step, a nack may
name its own delay, Browse shows when a message backing off comes back,
and max_deliveries still dead-letters. The steps themselves are computed
without a clock; over the wire they are observed with real time, short,
bounded from below (a timer never fires early) and generously from above."""

from __future__ import annotations

import itertools
import queue
import time
from collections.abc import Callable

import pytest

from msgboard.client import Client, Redelivery
from msgboard.engine import Board, holders
from msgboard.engine.writer import Batch
from msgboard.errors import InvalidArgument
from msgboard.message import Message, now_us
from msgboard.spec import NACK_BACKOFF, Delivery, QueueSpec

S = 1_000_000


def test_the_steps_grow_by_the_multiplier_up_to_the_maximum() -> None:
    """Given 1 s x 2 up to 5 min, I expect 1, 2, 4 ... 256 s, then 300 s."""
    r = Redelivery(S, 2.0, 300 * S)
    assert [r.delay(n) // S for n in range(1, 11)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert Redelivery(S, 1.0, S).delay(50) == S


def test_a_huge_step_is_capped_not_overflowed() -> None:
    """Given the default nack backoff past 1,024 returns, or a multiplier of
    1,000 at its millionth return, I expect the maximum delay, not an
    OverflowError (which failed the whole commit group)."""
    assert NACK_BACKOFF.delay(2_000) == NACK_BACKOFF.most
    assert NACK_BACKOFF.delay(2**40) == NACK_BACKOFF.most
    assert Redelivery(1, 1_000.0, 86_400 * S).delay(10**6) == 86_400 * S
    assert Redelivery(1, 1e300, 86_400 * S).delay(3) == 86_400 * S
    assert Redelivery(0, 2.0, 0).delay(5) == 0
    assert Redelivery(S, 1_000.0, 86_400 * S).delay(2) == 1_000 * S


def test_a_multiplier_over_1000_is_invalid_argument(client: Client) -> None:
    """Given a multiplier of 1e300, I expect INVALID_ARGUMENT naming it."""
    with pytest.raises(InvalidArgument) as e:
        client.create_queue("q", redelivery=Redelivery(S, 1e300, 10 * S))
    assert e.value.field == "spec.redelivery.multiplier"
    assert "at most 1000" in str(e.value)
    client.create_queue("q", redelivery=Redelivery(S, 1_000.0, 10 * S))


def test_nacks_wait_each_step_then_max_deliveries_dead_letters(client: Client) -> None:
    """Given a queue redelivering after 0.3 s x 2 up to 0.8 s, with
    max_deliveries 4, when a subscriber nacks every delivery, I expect the
    gaps between the four deliveries to be at least 0.3, 0.6 and 0.8 s, and
    the fourth nack to dead-letter the message."""
    client.create_queue("dlq")
    policy = Redelivery(300_000, 2.0, 800_000)
    client.create_queue("jobs", redelivery=policy, max_deliveries=4, dead_letter="dlq")
    client.post("jobs", ("job",))
    times = []
    with client.subscribe("jobs", credit=1) as sub:
        for d in sub:
            times.append(now_us())
            assert d.message.delivery_count == len(times)
            sub.nack(d)
            if len(times) == 4:
                break
        deadline = time.monotonic() + 30
        while not client.read("dlq", max=1):
            assert time.monotonic() < deadline, "never dead-lettered"
            time.sleep(0.05)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    for gap, step in zip(gaps, (300_000, 600_000, 800_000), strict=True):
        assert step - 20_000 <= gap <= step + 10 * S, (gaps, step)
    [dead] = client.read("dlq", max=1)
    assert dead.headers["x-dead-letter-reason"] == "max-deliveries"


def test_a_nack_s_own_delay_and_browse_s_time(client: Client) -> None:
    """Given a message nacked with a delay of 30 s, I expect Browse to show
    when it comes back, and no Take to get it meanwhile."""
    client.create_queue("jobs")
    client.post("jobs", ("job",))
    with client.subscribe("jobs", credit=1) as sub:
        d = next(iter(sub))
        t0 = now_us()
        sub.nack(d, delay=30)
        deadline = time.monotonic() + 30
        while True:
            [m] = client.browse("jobs").messages
            if m.redeliver_at:
                break
            assert time.monotonic() < deadline, "the nack was never applied"
            time.sleep(0.05)
        t1 = now_us()
        assert t0 + 30 * S - 20_000 <= m.redeliver_at <= t1 + 30 * S
        assert m.delivery_count == 1
    assert client.take("jobs", max=1, timeout=0) == []


def test_a_lost_consumer_backs_off_and_a_subscription_s_policy_wins(client: Client) -> None:
    """Given a queue whose policy is 30 s, I expect a consumer that goes
    away to leave its delivery backing off (Browse says until when), while
    a subscription with its own policy of no delay gets a nacked message
    back at once."""
    client.create_queue("jobs", redelivery=Redelivery(30 * S, 2.0, 60 * S))
    client.post("jobs", ("a",))
    with client.subscribe("jobs", credit=1) as sub:
        next(iter(sub))
        t0 = now_us()
    [m] = client.browse("jobs").messages
    assert t0 + 30 * S - 20_000 <= m.redeliver_at <= now_us() + 30 * S
    client.post("jobs", ("b",))
    now = Redelivery(0, 1.0, 0)
    with client.subscribe("jobs", credit=1, redelivery=now) as sub:
        got = []
        for d in sub:
            got.append(d.message.tuple)
            if len(got) == 1:
                sub.nack(d)
            else:
                sub.ack(d)
                break
    assert got == [("b",), ("b",)]


def test_bad_policies_and_delays_are_invalid_argument(client: Client) -> None:
    """A multiplier below 1, a max below initial and a nack delay over a
    day: INVALID_ARGUMENT naming the field."""
    with pytest.raises(InvalidArgument) as e:
        client.create_queue("q", redelivery=Redelivery(S, 0.5, 10 * S))
    assert e.value.field == "spec.redelivery.multiplier"
    with pytest.raises(InvalidArgument) as e:
        client.create_queue("q", redelivery=Redelivery(10 * S, 2.0, S))
    assert e.value.field == "spec.redelivery.max"
    client.create_queue("q")
    with (
        pytest.raises(InvalidArgument) as e,
        client.subscribe("q", redelivery=Redelivery(S, 0.5, S)) as sub,
    ):
        next(iter(sub))
    assert e.value.field == "open.redelivery.multiplier"
    client.post("q", ("x",))
    with client.subscribe("q", credit=1) as sub:
        d = next(iter(sub))
        sub.nack(d, delay=2 * 86_400)
        with pytest.raises(InvalidArgument) as e:
            next(iter(sub))
    assert e.value.field == "nack.delay"


class FakeClock:
    """A monotonic clock that stands still at ``now`` (seconds)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def record_redeliveries(
    board: Board, monkeypatch: pytest.MonkeyPatch, clock: FakeClock, *, at_once: bool
) -> list[float]:
    """Stands the holders' clock still at ``clock`` and returns the list
    each redelivery timer armed appends its delay (s) to; with ``at_once``
    the timer itself runs at once, so the test does not wait."""
    monkeypatch.setattr(holders, "time", clock)
    writer = board._writer
    armed: list[float] = []
    real_at = writer.at

    def at(deadline: float, run: Callable[[Batch], object]) -> object:
        if getattr(getattr(run, "func", None), "__name__", "") == "_release":
            armed.append(deadline - clock.now)
            if at_once:
                deadline = 0.0
        return real_at(deadline, run)

    monkeypatch.setattr(writer, "at", at)
    return armed


def test_the_engine_arms_each_step_on_a_fake_clock(
    board: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a queue redelivering after 1 s x 2 up to 5 min, with the
    holders' clock standing still, when a consumer nacks the same message
    ten times, I expect the engine to arm its redelivery 1, 2, 4 ... 256,
    then 300 s ahead (the timer itself is run at once, so no time passes),
    and a nack's own delay to win."""
    armed = record_redeliveries(board, monkeypatch, FakeClock(1000.0), at_once=True)
    board.create_queue(QueueSpec("jobs", redelivery=Redelivery(S, 2.0, 300 * S)))
    board.post("jobs", [Message(body=b"x")])
    got: queue.SimpleQueue[list[Delivery]] = queue.SimpleQueue()
    c, _ = board.subscribe("jobs", deliver=got.put, end=lambda why: None, credit=1)
    for n in range(11):
        [d] = got.get(timeout=30)
        assert d.message.delivery_count == n + 1
        board.nack(c, [d.id], delay=7 * S if n == 10 else None)
    assert armed == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 7]
    board.unsubscribe(c)


def test_a_nacked_lease_without_a_policy_waits_the_nack_backoff(
    board: Board, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a queue without a redelivery policy, when a Take's lease is
    nacked, I expect its message held back NACK_BACKOFF's first step (as a
    Subscribe's nack is), not routed again at once."""
    clock = FakeClock(time.monotonic())  # the lease runs on it too
    armed = record_redeliveries(board, monkeypatch, clock, at_once=False)
    board.create_queue(QueueSpec("jobs"))
    board.post("jobs", [Message(body=b"x")])
    [d] = board.take_leased("jobs", lease=60)
    board.ack_leases("jobs", [d.id], nack=True)
    deadline = time.monotonic() + 30  # the timer is armed once durable
    while not armed:
        assert time.monotonic() < deadline, "no redelivery timer was armed"
        time.sleep(0.01)
    assert armed == [pytest.approx(NACK_BACKOFF.initial / S)]
    [m] = board.browse("jobs").messages
    assert m.delivery_count == 1 and m.redeliver_at
