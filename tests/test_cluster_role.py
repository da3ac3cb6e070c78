"""A board's role in its cluster (msgboard/cluster/role.py): what it
refuses, and who hears of each change.

Given a role, when the node makes it a primary, a standby or a primary
that lost its lease, I expect the refusal a client call gets to say so,
and every listener to hear each change once, with the role's epoch.
"""

from __future__ import annotations

from msgboard.cluster import Role
from msgboard.errors import NoLease, NotPrimary, Unavailable


def test_a_static_primary_refuses_nothing_and_a_static_standby_names_its_primary() -> None:
    assert Role().refusal() is None
    refusal = Role("127.0.0.1:9").refusal()
    assert isinstance(refusal, NotPrimary) and refusal.primary == "127.0.0.1:9"


def test_listeners_hear_each_change_of_role_and_epoch_once() -> None:
    role = Role(leading=False)
    heard: list[tuple[bool, str | None, int]] = []
    role.listen(lambda r: heard.append((r.is_primary, r.primary, r.epoch)))
    role.become(leading=False, primary="a:1", epoch=7)
    role.become(leading=False, primary="a:1", epoch=7)  # no change: not told
    role.become(leading=True, primary=None, epoch=9)
    role.become(leading=False, primary="b:2", epoch=12)
    assert heard == [(False, "a:1", 7), (True, None, 9), (False, "b:2", 12)]
    assert role.epoch == 12


def test_a_failing_listener_does_not_stop_the_others() -> None:
    role = Role(leading=False)
    heard: list[int] = []

    def bad(r: Role) -> None:
        raise RuntimeError("boom")

    role.listen(bad)
    role.listen(lambda r: heard.append(r.epoch))
    role.become(leading=True, primary=None, epoch=3)
    assert heard == [3]


def test_a_primary_without_its_lease_refuses_with_no_lease() -> None:
    term: list[object | None] = [object()]
    role = Role(leading=True, epoch=5, term=lambda: term[0])
    assert role.refusal() is None
    term[0] = None
    refusal = role.refusal()
    assert isinstance(refusal, NoLease) and refusal.epoch == 5
    assert refusal.info() == {"epoch": "5"}


def test_a_standby_that_knows_no_primary_sends_clients_to_another_board() -> None:
    """A standby that knows of no primary (a fenced primary cut off from
    etcd is one) answers NotPrimary naming no one: a following client
    moves to the next board instead of waiting on this one."""
    refusal = Role(leading=False).refusal()
    assert isinstance(refusal, NotPrimary) and refusal.primary == ""
    assert isinstance(refusal, Unavailable) and "knows of no primary" in str(refusal)
    assert refusal.info() == {"primary": ""}
