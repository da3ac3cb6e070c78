"""A model of the cluster's protocol, explored breadth-first: ``explore``.

Three boards, a client and a small etcd (a leader key under a lease, the
in-sync set, revisions, compare-and-swap), stepped one event at a time
through every interleaving up to a depth, each state seen once. The
decisions are the running board's own functions, not copies:
``members.promotable`` (who may lead), ``members.may_discard`` (when a
board that led may throw its data away), ``service.judge_entry`` (whether
a standby's log is a prefix of the primary's: it follows on, or is
refused and seeds itself), ``insync.joins`` (when a standby joins the
set) and ``insync.released`` (what the gate may answer). The rule before
issue 33 is kept beside them (``BEFORE``) to show what it allowed.

What is modelled, per board: whether it runs; its log (entries
``(epoch, write)``) and its ``led`` file, both on disk; the term it leads
in, the set its gate knows, and the primary it follows, all in memory
(gone with a kill). Its published position is read from its state when a
candidate judges (a member key lives only while its board runs: a dead
board's key is taken as gone at once, which only makes elections
rarer). etcd: the revision, the leader key (board, epoch = its revision),
the in-sync set (epoch, standbys, writer).

Events (each an atomic step; the real code's compares in etcd make the
steps that touch etcd atomic, and its clock makes a lapsed term end at the
board before etcd can free the key, which the model takes as one step; where
etcd frees the key early, the next leader's wait of one TTL before it
serves keeps the two in that order: ``Leadership``, "A term that begins"):

- ``kill b`` / ``restart b``: memory lost, disk kept; a restarted board is
  a standby that follows nobody yet;
- ``lease-loss b``: the leader key of b's term is gone and b's term with
  it (a kill leaves the key until this step; a pause of the primary past
  its lease is this step with no other step of b in between, which the
  interleavings include);
- ``halt b``: a standby stops following to judge an election (no leader);
- ``elect b``: b campaigns with the promotion rule over the set and the
  positions (the leader key must be absent): it leads in a new epoch and
  writes its ``led`` file;
- ``write-set b``: the new primary's first set, empty (CAS);
- ``join b s``: s, following b and caught up (``joins``), is added (CAS);
- ``write b``: a client's post committed by the primary (commit fence);
- ``answer b``: the primary answers the posts of its term that
  ``released`` lets go (acks of its set's members that follow it);
- ``ship s``: the primary s follows sends it its next entry, s applies it;
- ``follow s``: s follows the leader; ``judge_entry`` on its last entry
  says whether it follows on; refused, it seeds itself (``seed s``: a copy
  of the primary's log, its led file gone) once ``may_discard`` allows;
- ``depose s`` (the rule before only): a board that led sets its data
  aside as soon as another board leads.

Invariants, on every state: no answered write missing from a board that
leads (``lost``); never two boards leading, nor one leading without the
leader key (``two leaders``); a board that answers holds the newest log of
every board its set names (``answer behind``); and one of liveness: when
every board runs and none leads or follows, one of them may be elected
(``stuck``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from msgboard.cluster.insync import joins, released
from msgboard.cluster.keys import Position, SyncSet
from msgboard.cluster.members import may_discard, promotable
from msgboard.cluster.service import judge_entry

NAMES = ("b0", "b1", "b2")

#: A log entry: (epoch, write); a write's number is its CRC in the model.
Entry = tuple[int, int]


class Board(NamedTuple):
    up: bool = True
    log: tuple[Entry, ...] = ()
    #: The epoch in its ``led`` file (0: none): on disk.
    led: int = 0
    #: The epoch it leads in (0: it does not); its gate's set, each member
    #: with the disk it joined with (None: not written in this term); the
    #: (board, epoch) it follows (None: none).
    term: int = 0
    stored: tuple[tuple[str, str], ...] | None = None
    following: tuple[int, int] | None = None
    #: Where its log ended when its term began (the gate's ``base``).
    base: int = 0
    #: Which disk it runs on: a new one after each wipe (its ``board-id``).
    disk: int = 0
    #: The highest log index its gate answered in this term (``covered``).
    covered: int = 0

    @property
    def stopped(self) -> bool:
        """Its position is final: it runs, leads nothing, follows nobody."""
        return self.up and not self.term and self.following is None

    def position(self, name: str) -> Position:
        epoch = self.log[-1][0] if self.log else 0
        return Position(name, "", len(self.log), epoch, self.stopped, board_id=str(self.disk))


class Etcd(NamedTuple):
    #: The revision of the last leader key (the set's writes are not
    #: counted: the model's compare-and-swap is one step, and only the
    #: order of epochs matters).
    rev: int = 0
    leader: tuple[int, int] | None = None
    sync: SyncSet | None = None


class State(NamedTuple):
    boards: tuple[Board, ...]
    etcd: Etcd
    answered: frozenset[int]
    writes: int


def promotable_before(
    me: str,
    sync: SyncSet | None,
    positions: Sequence[Position],
    needed: int,
    favoured: str = "",
    led: int = 0,
) -> list[Position] | None:
    """The rule at 32eaedb: the primary that wrote the set may always lead
    again, whatever it holds now (``led`` unused)."""
    if sync is not None and sync.primary == me:
        return []
    return promotable(me, sync, positions, needed, favoured)


@dataclass(frozen=True)
class Rules:
    """What the model runs (``wipes``: see its comment): ``promote`` (the promotion rule), ``keep``
    (a board that led keeps its data until ``may_discard``, and follows on
    when its log is a prefix; False: it sets it aside as soon as another
    board leads, as before), ``base`` (a standby joins only once it holds
    the log as it was when the term began; False: a batch behind the end
    is enough, as before), ``needed`` (--sync-standbys), ``writes`` (the
    client's posts), ``kills`` (kill and restart events)."""

    promote: Callable[..., list[Position] | None] = promotable
    keep: bool = True
    base: bool = True
    needed: int = 1
    writes: int = 2
    kills: bool = True
    #: A dead board's disk lost (its log and led file gone): not explored
    #: by default (see docs/replication.md: what the model does not cover).
    wipes: bool = False
    #: Whether the liveness invariant (``stuck``) is checked.
    live: bool = True
    #: Whether the set records the disk each member joined with (False: by
    #: name only, as before; a member on a new disk is still counted).
    ids: bool = True


NOW = Rules()
BEFORE = Rules(promote=promotable_before, keep=False, base=False)

START = State(tuple(Board() for _ in NAMES), Etcd(), frozenset(), 0)


def _put(s: State, i: int, b: Board) -> tuple[Board, ...]:
    return (*s.boards[:i], b, *s.boards[i + 1 :])


def _leads(s: State, i: int) -> bool:
    b = s.boards[i]
    return b.up and b.term > 0 and s.etcd.leader == (i, b.term)


def steps(s: State, rules: Rules) -> Iterator[tuple[str, State]]:
    """Every event enabled in ``s``, and the state after it."""
    e = s.etcd
    for i, b in enumerate(s.boards):
        name = NAMES[i]
        if rules.kills:
            if b.up:
                dead = Board(False, b.log, b.led, disk=b.disk)
                yield f"kill {name}", s._replace(boards=_put(s, i, dead))
            else:
                back = Board(True, b.log, b.led, disk=b.disk)
                yield f"restart {name}", s._replace(boards=_put(s, i, back))
                if rules.wipes and (b.log or b.led):
                    wiped = Board(False, disk=b.disk + 1)
                    yield f"wipe {name}", s._replace(boards=_put(s, i, wiped))
        if e.leader is not None and e.leader[0] == i:
            down = b._replace(term=0, stored=None, covered=0) if b.term == e.leader[1] else b
            yield (
                f"lease-loss {name}",
                s._replace(boards=_put(s, i, down), etcd=e._replace(leader=None)),
            )
        if not b.up:
            continue
        if e.leader is None and b.following is not None and not b.term:
            yield f"halt {name}", s._replace(boards=_put(s, i, b._replace(following=None)))
        if e.leader is None and b.stopped:
            yield from _elect(s, i, rules)
        if _leads(s, i):
            yield from _lead(s, i, rules)
        if b.following is not None:
            p, epoch = b.following
            primary = s.boards[p]
            if primary.up and primary.term == epoch and len(b.log) < len(primary.log):
                log = primary.log[: len(b.log) + 1]
                yield f"ship {name}", s._replace(boards=_put(s, i, b._replace(log=log)))
        if e.leader is not None and e.leader[0] != i and not b.term:
            yield from _follow(s, i, rules)


def _elect(s: State, i: int, rules: Rules) -> Iterator[tuple[str, State]]:
    b, e = s.boards[i], s.etcd
    positions = [x.position(NAMES[j]) for j, x in enumerate(s.boards) if x.up]
    if rules.promote(NAMES[i], e.sync, positions, rules.needed, "", led=b.led) is None:
        return
    epoch = e.rev + 1
    led = b.led or epoch if rules.keep else epoch  # before: rewritten each term
    leader = b._replace(
        term=epoch, led=led, stored=None, following=None, base=len(b.log), covered=0
    )
    yield (
        f"elect {NAMES[i]}",
        s._replace(boards=_put(s, i, leader), etcd=e._replace(rev=epoch, leader=(i, epoch))),
    )


def _lead(s: State, i: int, rules: Rules) -> Iterator[tuple[str, State]]:
    b, e, name = s.boards[i], s.etcd, NAMES[i]
    if b.stored is None:
        sync = SyncSet(b.term, (), 0, name)
        yield (
            f"write-set {name}",
            s._replace(boards=_put(s, i, b._replace(stored=())), etcd=e._replace(sync=sync)),
        )
        return
    held = dict(b.stored)

    def member(n: str, x: Board) -> bool:
        """Whether the gate counts ``x`` as the set's ``n``: by its name and
        the disk it joined with (``rules.ids``), or by its name alone."""
        return n in held and (not rules.ids or held[n] == str(x.disk))

    for j, x in enumerate(s.boards):
        other = NAMES[j]
        if (
            x.up
            and x.following == (i, b.term)
            and not member(other, x)  # not a member, or on a new disk
            and joins(len(x.log), len(b.log), rules.base and b.base)
            # Back on a new disk, it replaces the member it was: it must
            # hold everything answered on that one's acks.
            and (other not in held or len(x.log) >= b.covered)
        ):
            members = tuple(sorted({**held, other: str(x.disk)}.items()))
            ids = members if rules.ids else ()
            sync = SyncSet(b.term, tuple(n for n, _ in members), 0, name, ids)
            yield (
                f"join {name} {other}",
                s._replace(
                    boards=_put(s, i, b._replace(stored=members)),
                    etcd=e._replace(sync=sync),
                ),
            )
    if s.writes < rules.writes:
        w = s.writes + 1
        yield (
            f"write {name} (post {w})",
            s._replace(boards=_put(s, i, b._replace(log=(*b.log, (b.term, w)))), writes=w),
        )
    acks = [
        len(x.log)
        for j, x in enumerate(s.boards)
        if member(NAMES[j], x) and x.up and x.following == (i, b.term)
    ]
    upto = released(acks, rules.needed)
    new = frozenset(w for epoch, w in b.log[:upto] if epoch == b.term) - s.answered
    if new:
        answered = _put(s, i, b._replace(covered=max(b.covered, upto)))
        yield (
            f"answer {name} (posts {sorted(new)})",
            s._replace(boards=answered, answered=s.answered | new),
        )


def _follow(s: State, i: int, rules: Rules) -> Iterator[tuple[str, State]]:
    b, e, name = s.boards[i], s.etcd, NAMES[i]
    assert e.leader is not None
    p, epoch = e.leader
    if not rules.keep and b.led:
        # Before: set aside as soon as another board leads.
        yield f"depose {name}", s._replace(boards=_put(s, i, Board(True, (), 0, disk=b.disk)))
        return
    primary = s.boards[p]
    if b.following == (p, epoch) or not primary.up or primary.term != epoch:
        return
    at = len(b.log)
    theirs = (b.log[-1][0], b.log[-1][1]) if b.log else (0, 0)
    mine = primary.log[at - 1] if 0 < at <= len(primary.log) else None
    refused = judge_entry(name, at, theirs, 1, len(primary.log), mine)
    if refused is None:
        yield (
            f"follow {name} {NAMES[p]}",
            s._replace(boards=_put(s, i, b._replace(following=(p, epoch)))),
        )
    elif not rules.keep or may_discard(name, b.led, e.sync):
        seeded = Board(True, primary.log, 0, following=(p, epoch), disk=b.disk)
        yield f"seed {name} from {NAMES[p]}", s._replace(boards=_put(s, i, seeded))


def violations(
    s: State, before: State | None = None, event: str = "", rules: Rules = NOW
) -> list[str]:
    """The invariants ``s`` breaks (``before``/``event``: how it was reached)."""
    out = []
    waiting = rules.live and s.etcd.leader is None and all(b.stopped for b in s.boards)
    if waiting and not any(next(_elect(s, i, rules), None) for i in range(len(s.boards))):
        out.append("stuck: every board runs and waits, and none may lead")
    leading = [i for i, b in enumerate(s.boards) if b.up and b.term]
    if len(leading) > 1 or any(s.etcd.leader != (i, s.boards[i].term) for i in leading):
        out.append(f"two leaders: {[NAMES[i] for i in leading]}, key {s.etcd.leader}")
    for i in leading:
        holds = {w for _, w in s.boards[i].log}
        if missing := s.answered - holds:
            out.append(f"lost: {NAMES[i]} leads without answered posts {sorted(missing)}")
    if event.startswith("answer") and before is not None:
        i = NAMES.index(event.split()[1])
        log = s.boards[i].log
        sync = s.etcd.sync
        named = (*sync.standbys, sync.primary) if sync is not None else ()
        for n in named:
            theirs = s.boards[NAMES.index(n)].log
            if theirs != log[: len(theirs)]:
                out.append(f"answer behind: {NAMES[i]} answers, {n} holds a log it lacks")
    return out


def canonical(s: State) -> State:
    """``s`` with its revisions renumbered 1, 2, ... in order: the rules
    only compare them, so states that differ only there behave alike."""
    e = s.etcd
    seen = {e.rev}
    for b in s.boards:
        seen.update((b.led, b.term), (ep for ep, _ in b.log))
        if b.following is not None:
            seen.add(b.following[1])
    if e.leader is not None:
        seen.add(e.leader[1])
    if e.sync is not None:
        seen.add(e.sync.epoch)
    seen.discard(0)
    if len(seen) == max(seen, default=0):
        return s  # 1, 2, ... already
    rank = {r: n for n, r in enumerate(sorted(seen), 1)}
    rank[0] = 0
    boards = tuple(
        Board(
            b.up,
            tuple((rank[ep], w) for ep, w in b.log),
            rank[b.led],
            rank[b.term],
            b.stored,
            None if b.following is None else (b.following[0], rank[b.following[1]]),
            b.base,
            b.disk,
            b.covered,
        )
        for b in s.boards
    )
    sync = e.sync
    if sync is not None:
        sync = SyncSet(rank[sync.epoch], sync.standbys, 0, sync.primary, sync.ids)
    leader = None if e.leader is None else (e.leader[0], rank[e.leader[1]])
    return State(boards, Etcd(rank[e.rev], leader, sync), s.answered, s.writes)


@dataclass
class Outcome:
    """What ``explore`` found: states seen, the depth reached, and the
    first violation with the events that lead to it (empty: none)."""

    states: int
    depth: int
    violation: list[str]
    trace: list[str]


def explore(
    rules: Rules = NOW,
    depth: int = 14,
    limit: int = 10_000_000,
    each: Callable[[int, int], None] | None = None,
) -> Outcome:
    """Breadth-first over every sequence of up to ``depth`` events from a
    new cluster (three stopped, empty boards), each canonical state once;
    stops at the first violation (its trace is a shortest one). ``each``
    is told (depth, states seen) as each depth is done."""
    start = canonical(START)
    parent: dict[State, tuple[State, str] | None] = {start: None}
    frontier = [start]
    for level in range(1, depth + 1):
        nxt: list[State] = []
        for s in frontier:
            for event, after in steps(s, rules):
                c = canonical(after)
                if bad := violations(after, s, event, rules):
                    return Outcome(len(parent), level, bad, [*_trace(parent, s), event])
                if c in parent:
                    continue
                parent[c] = (s, event)
                nxt.append(c)
                if len(parent) > limit:
                    raise RuntimeError(f"more than {limit} states by depth {level}")
        frontier = nxt
        if each is not None:
            each(level, len(parent))
        if not frontier:
            return Outcome(len(parent), level - 1, [], [])
    return Outcome(len(parent), depth, [], [])


def _trace(parent: dict[State, tuple[State, str] | None], s: State) -> list[str]:
    events = []
    at = parent[s]
    while at is not None:
        s, event = at
        events.append(event)
        at = parent[s]
    return events[::-1]
