"""Federation: a queue that pulls from a queue on a linked board
(msgboard/links/pull.py, msgboard/engine/federation.py), on real boards
over loopback: credit from the local queue's room, keys, translation, the
way home of a BOUNCE, bad input, and a restart of either board mid-pull
that loses and duplicates nothing (judged by ``judge``, itself shown to
catch each violation)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from msgboard import Message
from msgboard.client import Client
from msgboard.errors import FailedPrecondition, InvalidArgument, MsgboardError, QueueNotFound
from msgboard.testing import ServerThread
from tests.cluster import wait_until
from tests.served import Served

# -- the checker ----------------------------------------------------------------


def judge(posted: Sequence[str], arrived: Sequence[Message], prefix: str, board: str) -> list[str]:
    """What is wrong with ``arrived`` (the local queue, in seq order) for
    the bodies ``posted`` (in the remote queue's order): each lost,
    duplicated, out of order, garbled or untranslated message, or one
    whose key is not its origin's. [] when every posted message arrived
    once, in order, intact and translated."""
    problems = []
    index = {b: i for i, b in enumerate(posted)}
    seen: dict[str, int] = {}
    last = -1
    for m in arrived:
        body = m.body.decode(errors="replace")
        if body not in index:
            problems.append(f"garbled: {body!r} was never posted")
            continue
        seen[body] = seen.get(body, 0) + 1
        if seen[body] == 2:
            problems.append(f"duplicated: {body!r}")
        if seen[body] == 1:
            if index[body] < last:
                problems.append(f"out of order: {body!r} after {posted[last]!r}")
            last = max(last, index[body])
        if not m.address.startswith(prefix):
            problems.append(f"untranslated: {body!r} at {m.address!r}")
        origin = m.headers.get("x-origin-seq", "")
        if m.key != f"link:{board}:work:{origin}":
            problems.append(f"keyed {m.key!r}, not by its origin (seq {origin!r})")
    problems += [f"lost: {b!r}" for b in posted if b not in seen]
    return problems


def _arrival(body: str, seq: int, board: str = "B", prefix: str = "c.") -> Message:
    return Message(
        address=f"{prefix}jobs",
        body=body.encode(),
        key=f"link:{board}:work:{seq}",
        headers={"x-origin-seq": str(seq)},
    )


def test_the_checker_catches_each_violation() -> None:
    """Given arrivals lost, duplicated, swapped, garbled, untranslated or
    keyed wrong, I expect the checker to name each; a faithful arrival it
    passes."""
    posted = ["m0", "m1", "m2"]
    good = [_arrival(b, i + 1) for i, b in enumerate(posted)]
    assert judge(posted, good, "c.", "B") == []
    assert judge(posted, good[:2], "c.", "B") == ["lost: 'm2'"]
    assert judge(posted, [*good, good[1]], "c.", "B") == ["duplicated: 'm1'"]
    assert judge(posted, [good[1], good[0], good[2]], "c.", "B") == [
        "out of order: 'm0' after 'm1'"
    ]
    assert judge(posted, [*good[:2], _arrival("mX", 3)], "c.", "B") == [
        "garbled: 'mX' was never posted",
        "lost: 'm2'",
    ]
    assert judge(posted, [*good[:2], _arrival("m2", 3, prefix="")], "c.", "B") == [
        "untranslated: 'm2' at 'jobs'"
    ]
    wrong = Message(address="c.jobs", body=b"m2", key="k", headers={"x-origin-seq": "3"})
    assert judge(posted, [*good[:2], wrong], "c.", "B") == [
        "keyed 'k', not by its origin (seq '3')"
    ]


# -- two boards in this process -------------------------------------------------


@pytest.fixture
def boards(tmp_path: Path) -> Iterator[tuple[ServerThread, ServerThread]]:
    central = ServerThread(tmp_path / "central").start()
    site = ServerThread(tmp_path / "site").start()
    try:
        yield central, site
    finally:
        site.stop()
        central.stop()


def _ids(c: Client) -> str:
    return c.stats("$sys").board_id


def test_a_queue_pulls_while_it_has_room(boards: tuple[ServerThread, ServerThread]) -> None:
    """Given a site queue of room 5 pulling central:work through a
    translator, and 12 messages on central, I expect 5 to come (translated,
    keyed by their origin, their own key and origin in headers) and 7 to
    wait on central; as the site's consumer takes them, the rest, in
    order, and nothing twice."""
    central, site = boards
    with Client(central.address) as c, Client(site.address) as s:
        c.create_queue("work")
        s.create_queue("work", max_unprocessed=5)
        s.create_link("central", central.address)
        v = s.create_selector(
            "work", to="work", source_link="central", translator="prefix +c. ; header set x-via=c"
        )
        assert (v.spec.source_link, v.spec.source, v.spec.destination) == (
            "central",
            "work",
            "work",
        )
        assert v.spec.translator == "prefix +c. ; header set x-via=c"
        for i in range(12):
            c.post("work", body=f"m{i}".encode(), address="jobs.new", key=f"p{i}")
        wait_until("5 on the site", lambda: s.get_queue("work").unprocessed == 5)
        wait_until("7 left on central", lambda: c.get_queue("work").unprocessed == 7)
        time.sleep(0.5)  # a pull past the room would show by now
        assert s.get_queue("work").unprocessed == 5
        assert c.get_queue("work").unprocessed == 7
        first = s.read("work", max=5)
        cid = _ids(c)
        assert [m.body for m in first] == [f"m{i}".encode() for i in range(5)]
        m = first[0]
        assert (m.address, m.headers["x-via"], m.key) == ("c.jobs.new", "c", f"link:{cid}:work:1")
        assert m.headers["x-origin-key"] == "p0"
        assert (m.headers["x-origin-board"], m.headers["x-origin-queue"]) == (cid, "work")
        assert m.headers["x-origin-seq"] == "1" and m.headers["x-msgboard-hops"] == "1"
        got: list[Message] = []
        deadline = time.monotonic() + 60
        while len(got) < 12 and time.monotonic() < deadline:
            got += s.take("work", timeout=1, max=3)
        assert [x.body for x in got] == [f"m{i}".encode() for i in range(12)]
        wait_until("central emptied", lambda: c.get_queue("work").unprocessed == 0)
        assert s.get_queue("work").unprocessed == 0


def test_a_pull_with_a_pattern_takes_only_what_matches(
    boards: tuple[ServerThread, ServerThread],
) -> None:
    """Given a pull of ``topic:jobs.#`` with a filter, I expect only the
    matching messages pulled, in order; the others stay on central."""
    central, site = boards
    with Client(central.address) as c, Client(site.address) as s:
        c.create_queue("work")
        s.create_queue("work")
        s.create_link("central", central.address)
        s.create_selector(
            "work", to="work", source_link="central", address="topic:jobs.#", filter="priority > 1"
        )
        for i, (address, priority) in enumerate(
            [("jobs.a", 2), ("misc", 2), ("jobs.b", 1), ("jobs.c", 5), ("other.jobs", 9)]
        ):
            c.post("work", address=address, priority=priority, body=f"m{i}".encode())
        wait_until("2 pulled", lambda: s.get_queue("work").unprocessed == 2)
        wait_until("3 left", lambda: c.get_queue("work").unprocessed == 3)
        assert [m.body for m in s.read("work", max=10)] == [b"m0", b"m3"]
        assert [m.body for m in c.read("work", max=10)] == [b"m1", b"m2", b"m4"]


def test_a_pull_is_listed_and_goes_with_its_queue(
    boards: tuple[ServerThread, ServerThread],
) -> None:
    """Given a pull selector, I expect it listed with its link, shown by
    GetSelector, its link refused deletion while it exists, and the
    selector gone with its local queue."""
    central, site = boards
    with Client(central.address) as c, Client(site.address) as s:
        c.create_queue("work")
        s.create_queue("work")
        s.create_link("central", central.address)
        v = s.create_selector("work", to="work", source_link="central")
        assert [x.id for x in s.list_selectors()] == [v.id]
        assert s.get_selector(v.id).spec.source_link == "central"
        with pytest.raises(FailedPrecondition, match=v.id):
            s.delete_link("central")
        s.delete_queue("work")
        assert s.list_selectors() == []
        s.delete_link("central")


def test_bad_pulls_are_refused_naming_what(boards: tuple[ServerThread, ServerThread]) -> None:
    """Given a pull from an unknown link, into a missing queue, as a COPY,
    or with a translator that does not parse, I expect FAILED_PRECONDITION,
    NOT_FOUND and INVALID_ARGUMENT naming the field; nothing made."""
    central, site = boards
    with Client(central.address) as c, Client(site.address) as s:
        c.create_queue("work")
        s.create_queue("work")
        with pytest.raises(FailedPrecondition, match="no link named 'nope'"):
            s.create_selector("work", to="work", source_link="nope")
        s.create_link("central", central.address)
        with pytest.raises(QueueNotFound, match="missing"):
            s.create_selector("work", to="missing", source_link="central")
        with pytest.raises(InvalidArgument) as e:
            s.create_selector("work", to="work", source_link="central", op="copy")
        assert e.value.field == "spec.op"
        with pytest.raises(InvalidArgument) as e:
            s.create_selector("work", to="work", source_link="central", translator="word x")
        assert e.value.field == "spec.translator" and "at 7" in str(e.value)
        with pytest.raises(InvalidArgument) as e:
            s.create_selector("work", source_link="central")
        assert e.value.field == "spec.destination"
        assert s.list_selectors() == []


def test_a_bounce_on_the_far_board_comes_home_through_the_link(
    boards: tuple[ServerThread, ServerThread],
) -> None:
    """Given site pushing orders to central:inbox with ``prefix +site1. ;
    reply back``, a BOUNCE on central's inbox, and site pulling
    central:back into answers with the same translator, I expect the
    bounced message home in answers as a BOUNCE on site would have made it:
    address the original reply_to, reply_to and x-bounced-from the original
    address."""
    central, site = boards
    text = "prefix +site1. ; reply back"
    with Client(central.address) as c, Client(site.address) as s:
        for q in ("inbox", "back"):
            c.create_queue(q)
        for q in ("orders", "answers"):
            s.create_queue(q)
        c.create_selector("inbox", op="bounce", address="topic:site1.#")
        s.create_link("central", central.address)
        s.create_selector("orders", to="inbox", link="central", translator=text)
        s.create_selector("back", to="answers", source_link="central", translator=text)
        s.post("orders", address="rec.cats", reply_to="answers", body=b"b1")
        wait_until("home", lambda: s.get_queue("answers").unprocessed == 1, timeout=60)
        [m] = s.read("answers")
        assert (m.address, m.reply_to, m.headers["x-bounced-from"]) == (
            "answers",
            "rec.cats",
            "rec.cats",
        )
        assert m.body == b"b1" and "x-link-reply-to" not in m.headers


def test_the_cli_pulls_from_link_colon_queue(
    boards: tuple[ServerThread, ServerThread], capsys: pytest.CaptureFixture[str]
) -> None:
    """Given ``selector create central:work --to work --translate ...`` on
    a site with a link named central, I expect a pull (listed as
    central:work, its translator shown); a bad translator refused with its
    position; and ``other:work``, with no link named other, a local queue."""
    from msgboard.cli.main import main

    central, site = boards
    with Client(central.address) as c, Client(site.address) as s:
        c.create_queue("work")
        s.create_queue("work")
        s.create_link("central", central.address)

        def cli(*args: str) -> tuple[int, str]:
            code = main([*args, "--server", site.address])
            out, err = capsys.readouterr()
            return code, out + err

        code, out = cli(
            "selector", "create", "central:work", "--to", "work", "--translate", "prefix +c."
        )
        assert code == 0, out
        code, out = cli("selector", "list", "--json")
        [row] = [json.loads(x) for x in out.splitlines()]
        assert (row["source"], row["to"], row["translator"]) == (
            "central:work",
            "work",
            "prefix +c.",
        )
        c.post("work", address="jobs", body=b"j1")
        wait_until("pulled", lambda: s.get_queue("work").unprocessed == 1)
        assert s.read("work")[0].address == "c.jobs"
        code, out = cli(
            "selector", "create", "central:work", "--to", "work", "--translate", "word x"
        )
        assert code != 0 and "spec.translator: at 7: expected '=' after 'x'" in out
        code, out = cli("selector", "create", "other:work", "--to", "work")
        assert code != 0 and 'source queue "other:work" does not exist' in out  # local


# -- restarts --------------------------------------------------------------------


class Two:
    """Two ``msgboard serve`` processes, each restarted on its directory and port."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ports: dict[str, int] = {}
        self.served: dict[str, Served] = {}
        self.everything: list[Served] = []

    def start(self, name: str) -> str:
        (self.tmp / name).mkdir(exist_ok=True)
        (self.tmp / name / "ready.json").unlink(missing_ok=True)
        port = self.ports.get(name, 0)
        deadline = time.monotonic() + 60
        while True:
            try:
                s = Served(self.tmp / name, "--listen", f"127.0.0.1:{port}")
                break
            except RuntimeError:  # a killed board's port may be held a moment
                if not port or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.everything.append(s)
        self.served[name] = s
        self.ports[name] = int(s.address.rsplit(":", 1)[1])
        return s.address

    def kill(self, name: str) -> None:
        self.served[name].kill()


def _answered(fn: object, *args: object, **kw: object) -> object:
    """Calls ``fn`` until a board answers it (either may be down a while)."""
    deadline = time.monotonic() + 90
    while True:
        try:
            return fn(*args, **kw)  # type: ignore[operator]
        except MsgboardError as e:
            if e.code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED"):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_restart_of_either_board_mid_pull_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    """Given a site pulling central:work (translated) while 400 keyed
    messages are posted on central, and central killed (-9) and restarted,
    then the site, then central stopped cleanly and restarted, all
    mid-pull, I expect every message on the
    site once, in central's order, translated and keyed by its origin, and
    central's queue empty."""
    two = Two(tmp_path)
    try:
        central, site = two.start("central"), two.start("site")
        n = 400
        posted = [f"m{i}" for i in range(n)]
        with Client(central, timeout=10) as c, Client(site, timeout=10) as s:
            c.create_queue("work", dedup_window=3600)
            s.create_queue("work", dedup_window=3600)
            s.create_link("central", central)
            s.create_selector("work", to="work", source_link="central", translator="prefix +c.")
            cid = _ids(c)

            def post() -> None:
                for i, body in enumerate(posted):
                    _answered(c.post, "work", body=body.encode(), address="jobs", key=f"p{i}")
                    time.sleep(0.01)  # paced: every restart falls mid-post

            poster = threading.Thread(target=post, daemon=True)
            poster.start()

            def arrived() -> int:
                return int(_answered(lambda: s.get_queue("work").unprocessed))  # type: ignore[arg-type]

            wait_until("a quarter arrived", lambda: arrived() >= n // 4, timeout=90)
            assert poster.is_alive()  # mid-post, mid-pull
            two.kill("central")
            time.sleep(0.3)
            two.start("central")
            wait_until("half arrived", lambda: arrived() >= n // 2, timeout=90)
            assert poster.is_alive()
            two.kill("site")
            time.sleep(0.3)
            two.start("site")
            wait_until("three quarters arrived", lambda: arrived() >= 3 * n // 4, timeout=90)
            two.served["central"].stop()  # a clean stop this time (SIGTERM)
            two.start("central")
            poster.join(120)
            assert not poster.is_alive()
            wait_until("all arrived", lambda: arrived() >= n, timeout=120)
            wait_until(
                "central emptied",
                lambda: _answered(lambda: c.get_queue("work").unprocessed) == 0,
                timeout=60,
            )
            time.sleep(1)  # a late duplicate would show by now
            page = _answered(lambda: s.browse("work", limit=2 * n))
            got = list(page.messages)  # type: ignore[attr-defined]
        assert judge(posted, got, "c.", cid) == []
    finally:
        for p in two.everything:
            p.kill()
