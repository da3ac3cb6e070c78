"""Faults under load, with static roles: a primary and two standbys
(tests/faults.py's ``Trio``), the workload of tests/workload.py against the
primary, a fault in the middle, and the checker of tests/jepsen.py at the
end (shown each violation in tests/test_jepsen.py): every post answered OK
is on the final primary exactly once, nothing acked is delivered again,
first deliveries keep posting order, and every standby holds the
primary's data, byte for byte, and passes ``msgboard check``.

The stories: a standby killed (-9) under load (writes go on with the
other; it catches up when it returns); both standbys killed (writes stop
with UNAVAILABLE, nothing answered is lost, writes resume when one
returns); a standby paused (SIGSTOP) past the sync timeout with two
standbys required (writes fail, then resume on SIGCONT); the primary cut
off from its standbys (no write answered OK while cut), then killed and a
standby promoted; the primary killed under load and the most advanced
standby's directory opened as the new primary, which holds every answered
write exactly once and serves the consumers on.

Each runs some 10-20 s of load, waiting on conditions, never on timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.errors import Unavailable
from tests.faults import Trio, pause, resume, wait_for
from tests.served import Served
from tests.workload import History, Workload, now, posted, prepare

#: Long enough that a loaded machine does not fail writes by itself.
PATIENT = ("--sync-timeout-ms", "20000")
#: Short enough that a test sees writes fail.
QUICK = ("--sync-timeout-ms", "2000")


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def trios() -> Iterator[list[Trio]]:
    made: list[Trio] = []
    yield made
    for t in made:
        t.close()


def answered_after(h: History, t: float, n: int = 20, seconds: float = 90) -> None:
    """Waits until ``n`` posts invoked after ``t`` were answered OK."""
    wait_for(lambda: len(posted(h.ops(), after=t)) >= n, f"{n} posts answered after {t:.1f}")


def failed_after(h: History, t: float, seconds: float = 90) -> None:
    """Waits until a post invoked after ``t`` failed (or its answer was lost)."""

    def seen() -> bool:
        return any(o.kind == "post" and o.outcome != "ok" and o.invoked_at > t for o in h.ops())

    wait_for(seen, f"a post invoked after {t:.1f} failed", seconds)


def writes_stop(h: History, address: str, since: float) -> None:
    """Writes invoked after ``since`` fail: the workload's, and one now,
    answered UNAVAILABLE saying the standbys are missing; none invoked
    after ``since`` was answered OK by now."""
    failed_after(h, since)
    with Client(address, timeout=60) as c, pytest.raises(Unavailable, match="no standby in sync"):
        c.post("kept", body=b"refused", key="refused")
    assert posted(h.ops(), after=since, before=now()) == []


def start(trio: Trio) -> tuple[History, Workload]:
    prepare(trio.primary.address)
    h = History()
    w = Workload(h, trio.primary.address).start()
    answered_after(h, 0.0)
    busy(h, "w")
    return h, w


def busy(h: History, name: str) -> None:
    """Waits until every client of workload ``name`` had a call answered OK."""
    roles = ("poster0", "poster1", "streamer", "subscriber", "leaser", "taker")

    def all_busy() -> bool:
        ok = {o.client for o in h.ops() if o.outcome == "ok"}
        return all(f"{name}-{r}" in ok for r in roles)

    wait_for(all_busy, f"every client of {name} answered")


def test_a_standby_killed_under_load(tmp: Path, trios: list[Trio]) -> None:
    """Given a primary that needs one of its two standbys, when I kill -9
    one under load, I expect writes to go on with the other, the killed
    one to catch up when it returns, and the checker to find nothing."""
    trio = Trio(tmp, *PATIENT)
    trios.append(trio)
    h, w = start(trio)
    trio.standbys[0].kill()
    answered_after(h, now())
    trio.restart(0)
    answered_after(h, now())
    w.stop()
    assert trio.finish(h) == []


def test_both_standbys_killed_writes_stop_and_resume(tmp: Path, trios: list[Trio]) -> None:
    """Given a strict primary and two standbys, when I kill -9 both under
    load, I expect writes to fail UNAVAILABLE and none invoked after the
    kill answered OK until a standby returns; then writes resume, and the
    checker finds nothing lost."""
    trio = Trio(tmp, *QUICK)
    trios.append(trio)
    h, w = start(trio)
    for s in trio.standbys:
        s.kill()
    killed = now()  # both gone: nothing invoked from now on can be acknowledged
    writes_stop(h, trio.primary.address, killed)
    trio.restart(0)
    answered_after(h, now())
    trio.restart(1)
    answered_after(h, now())
    w.stop()
    assert trio.finish(h) == []


def test_a_standby_paused_past_the_sync_timeout(tmp: Path, trios: list[Trio]) -> None:
    """Given a primary that needs both its standbys, when I SIGSTOP one
    past the sync timeout, I expect writes to fail UNAVAILABLE, none
    invoked after the pause answered OK while it lasts, and writes to
    resume on SIGCONT."""
    trio = Trio(tmp, "--sync-standbys", "2", *QUICK)
    trios.append(trio)
    h, w = start(trio)
    pause(trio.standbys[0])
    paused = now()  # stopped: it acknowledges nothing from now on
    writes_stop(h, trio.primary.address, paused)
    resume(trio.standbys[0])
    answered_after(h, now())
    w.stop()
    assert trio.finish(h) == []


def test_a_primary_cut_off_from_its_standbys_answers_no_write(tmp: Path, trios: list[Trio]) -> None:
    """Given standbys that reach the primary through proxies, when I cut
    both under load, I expect its writes to fail and none invoked after
    the cut answered OK; when it is then killed and the most advanced
    standby promoted, I expect every write it answered on the new primary."""
    trio = Trio(tmp, *QUICK, proxied=True)
    trios.append(trio)
    h, w = start(trio)
    for p in trio.proxies:
        p.cut()
    cut = now()  # nothing crosses from now on
    writes_stop(h, trio.primary.address, cut)
    trio.primary.kill()
    killed = now()
    w.stop()
    assert posted(h.ops(), after=cut, before=killed) == []
    _failover(trio, h)


def test_every_answered_write_survives_a_kill_of_the_primary(tmp: Path, trios: list[Trio]) -> None:
    """Given a primary and two standbys under load, when I kill -9 the
    primary and open the most advanced standby's directory as the new
    primary, I expect it to hold every answered write exactly once, its
    consumers to go on with nothing acked delivered again, and the other
    standby to follow it and hold the same data."""
    trio = Trio(tmp, *PATIENT)
    trios.append(trio)
    h, w = start(trio)
    answered_after(h, now(), n=100)
    trio.primary.kill()
    w.stop()
    _failover(trio, h)


def _failover(trio: Trio, h: History) -> None:
    """Promotes the standby with the highest log index, runs the workload
    on it for a while, and asks the checker."""
    for s in trio.standbys:
        s.stop()
    new: Served = trio.promote(trio.most_advanced())
    w = Workload(h, new.address, name="w2").start()
    answered_after(h, now())
    busy(h, "w2")
    trio.caught_up()
    w.stop()
    assert trio.finish(h) == []
