"""Selectors that cross a link, told with real boards on loopback: what
the site's selector takes arrives on central's queue once, in source
order, keyed by its origin; a full remote queue holds messages here; a
refused token makes the selector wait and $sys say why; a loop between
two boards ends dead-lettered ``max-hops``; the link's figures and events."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from msgboard.associative import EVERYTHING, Pattern
from msgboard.client import Client
from msgboard.client.patterns import make_pattern
from msgboard.config import ServeConfig
from msgboard.engine import Board
from msgboard.links import Links, key_of
from msgboard.lmdbstore.boardid import stable_id
from msgboard.message import ExitKind, Message, Section
from msgboard.results import Start
from msgboard.security import Security
from msgboard.security.auth import token_hash
from msgboard.server.metrics import LinksCollector
from msgboard.spec import (
    HOPS,
    ORIGIN_BOARD,
    ORIGIN_KEY,
    ORIGIN_QUEUE,
    ORIGIN_SEQ,
    LinkSpec,
    QueueSpec,
    SelectorSpec,
)
from msgboard.testing import ServerProcess, ServerThread
from tests.faults import wait_for
from tests.pki import CA
from tests.test_metrics import scrape
from tests.test_security_permissions import users_file
from tests.twoboards import Boards


def numbers(c: Client, queue: str) -> list[int]:
    """The first tuple field of every message waiting on ``queue``."""
    out: list[int] = []
    page = c.browse(queue, Start.OLDEST, limit=1000, section=Section.UNPROCESSED)
    out += [int(m.tuple[0]) for m in page.messages]  # type: ignore[arg-type]
    assert not page.next_seq
    return out


def linked(
    boards: Boards, *, op: str = "move", limit: int = 0, address: str = "", filter: str = ""
) -> str:
    """central has queue "in" (at most ``limit`` waiting), the site queue
    "out" and a selector from it to central's "in" across link "central";
    returns the selector's id."""
    boards.c.create_queue("in", max_unprocessed=limit)
    boards.s.create_queue("out")
    boards.s.create_link("central", boards.central.address)
    sel = boards.s.create_selector(
        "out", to="in", link="central", op=op, address=address or None, filter=filter
    )
    return sel.id


def test_a_move_across_arrives_once_in_order_keyed_by_its_origin(boards: Boards) -> None:
    """Given a MOVE from the site's "out" to central's "in", when two
    threads post 300 messages, I expect each on central once, per poster
    in the order posted (the source's seq order), keyed by origin, with
    its origin and hop count in its headers, and nothing left at the site."""
    sid = linked(boards)

    def post(first: int) -> None:
        with Client(boards.site.address, timeout=30) as c:
            for i in range(first, first + 150, 10):
                c.post_many("out", [(n,) for n in range(i, i + 10)], batch=10)

    threads = [threading.Thread(target=post, args=(k,)) for k in (0, 1000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_for(lambda: boards.c.get_queue("in").unprocessed >= 300, "300 on central")
    got = boards.c.browse("in", Start.OLDEST, limit=1000).messages
    values = [int(m.tuple[0]) for m in got]  # type: ignore[arg-type]
    assert sorted(values) == sorted([*range(150), *range(1000, 1150)])
    assert [v for v in values if v < 1000] == list(range(150))
    assert [v for v in values if v >= 1000] == list(range(1000, 1150))
    seqs = [int(m.headers[ORIGIN_SEQ]) for m in got]
    assert seqs == sorted(seqs)  # central's order is the source's seq order
    board_id = got[0].headers[ORIGIN_BOARD]
    for i, m in enumerate(got, 1):
        assert m.key == key_of(board_id, sid, i)
        assert m.headers[ORIGIN_QUEUE] == "out" and m.headers[HOPS] == "1"
    v = boards.link()
    assert (v.forwarded, v.duplicates, v.lag_messages) == (300, 0, 0)
    assert boards.s.get_queue("out").unprocessed == 0
    assert boards.s.get_queue(f"$link.{sid}").unprocessed == 0
    [sel] = boards.s.list_selectors("out")
    assert sel.delivered == 300


def test_a_copy_across_with_a_pattern_and_a_filter(boards: Boards) -> None:
    """A COPY with an address pattern and a filter copies only what both
    match; the source keeps every message for its local taker."""
    linked(boards, op="copy", address="topic:rec.*", filter="priority > 3")
    for prio, address in ((5, "rec.a"), (1, "rec.b"), (9, "other"), (7, "rec.c")):
        boards.s.post("out", (prio,), address=address, priority=prio)
    wait_for(lambda: boards.c.get_queue("in").unprocessed >= 2, "two copies on central")
    assert numbers(boards.c, "in") == [5, 7]
    assert numbers(boards.s, "out") == [5, 1, 9, 7]


def test_a_key_already_held_there_is_a_duplicate_not_a_second_message(boards: Boards) -> None:
    """Given central already holding the key the first message will carry
    (as after a crash between central's answer and the site's ack), I
    expect that message answered DUPLICATE and counted, not stored again,
    and the next one stored."""
    boards.c.create_queue("in")
    boards.s.create_queue("out")
    boards.s.create_link("central", boards.central.address)
    board_id = stable_id(str(boards.site.data))
    sid = boards.s.create_selector("out", to="in", link="central").id
    boards.s.delete_selector(sid)  # learn the id the next selector gets
    nxt = f"sel-{int(sid.split('-')[1]) + 1}"
    boards.c.post("in", (0,), key=key_of(board_id, nxt, 1))
    assert boards.s.create_selector("out", to="in", link="central").id == nxt
    boards.s.post("out", (1,), key="mine")
    boards.s.post("out", (2,))
    wait_for(lambda: boards.link().forwarded + boards.link().duplicates >= 2, "both answered")
    assert (boards.link().forwarded, boards.link().duplicates) == (1, 1)
    got = boards.c.read("in", max=10)
    assert [m.tuple for m in got] == [(0,), (2,)]
    assert ORIGIN_KEY not in got[1].headers  # (2,) had no key of its own


def test_a_full_remote_queue_holds_messages_here_in_order(boards: Boards) -> None:
    """Given central's queue limited to 5, when 40 are posted at the site, I
    expect 5 there, 35 waiting here (source and outbox) and none refused or
    lost; taking central's brings the rest, in order; a restart of the
    site meanwhile changes nothing."""
    sid = linked(boards, limit=5)
    boards.s.post_many("out", [(n,) for n in range(40)], batch=40)
    wait_for(lambda: boards.c.get_queue("in").unprocessed == 5, "central full")
    assert numbers(boards.c, "in") == list(range(5))
    here = numbers(boards.s, "out") + numbers(boards.s, f"$link.{sid}")
    assert sorted(here) == list(range(5, 40))
    wait_for(lambda: boards.link().lag_messages > 0, "lag shown")
    boards.restart_site()
    taken: list[int] = []
    while len(taken) < 40:
        got = boards.c.take("in", max=5, timeout=30)
        assert got, f"nothing more after {taken}"
        taken += [int(m.tuple[0]) for m in got]  # type: ignore[arg-type]
    assert taken == list(range(40))
    wait_for(lambda: boards.link().lag_messages == 0, "caught up")


def test_a_revoked_token_makes_the_selector_wait_and_sys_say_why(tmp_path: Path) -> None:
    """Given central with a users file where the site's token may write
    "jobs*", when the token is revoked (the file reloaded without it), I
    expect posts at the site to wait there, the link disconnected with
    UNAUTHENTICATED on $sys, and, once the token is back, every message
    delivered in order."""
    users = {"root": ["admin"], "site": ["write"]}
    path = users_file(tmp_path / "users.toml", users)
    security = Security.build(ServeConfig(listen="127.0.0.1:0", users=str(path)))
    central = ServerThread(tmp_path / "central", security=security).start()
    site = ServerThread(tmp_path / "site").start()
    try:
        with (
            Client(central.address, token="root-t", timeout=30) as c,
            Client(site.address, timeout=30) as s,
        ):
            c.create_queue("jobs.in")
            s.create_queue("out")
            s.create_link("central", central.address, token="site-t")
            s.create_selector("out", to="jobs.in", link="central")
            s.post("out", (0,))
            wait_for(lambda: c.get_queue("jobs.in").unprocessed == 1, "the first")
            users_file(path, {"root": ["admin"]})
            security.reload()
            s.post_many("out", [(n,) for n in range(1, 6)], batch=5)

            def said() -> list[Message]:
                return s.read("$sys", ("link.disconnected", "central", str), max=10)

            wait_for(lambda: bool(said()), "link.disconnected on $sys")
            assert "UNAUTHENTICATED" in str(said()[0].tuple[2])
            [v] = s.list_links()
            assert v.state == "disconnected" and "UNAUTHENTICATED" in v.last_error
            assert c.get_queue("jobs.in").unprocessed == 1
            users_file(path, users)
            security.reload()
            wait_for(lambda: c.get_queue("jobs.in").unprocessed == 6, "the rest")
            assert [m.tuple[0] for m in c.read("jobs.in", max=10)] == list(range(6))
            wait_for(lambda: s.list_links()[0].state == "connected", "connected again")
    finally:
        site.stop()
        central.stop()


def test_a_loop_between_two_boards_ends_dead_lettered_max_hops(boards: Boards) -> None:
    """Given A's "loop" moving to B's "loop" and B's back to A's, a message
    posted on A goes round until its hop count passes the bound, then is
    dead-lettered with reason max-hops (in the history of the queue where
    it stopped), not forwarded for ever."""
    for c, other, name in ((boards.s, boards.central, "b"), (boards.c, boards.site, "a")):
        c.create_queue("loop", max_history=100)
        c.create_link(name, other.address)
        c.create_selector("loop", to="loop", link=name)
    boards.s.post("loop", ("round",))

    def stopped() -> list[Message]:
        out = []
        for c in (boards.s, boards.c):
            page = c.browse("loop", Start.OLDEST, limit=100, section=Section.HISTORY)
            out += [m for m in page.messages if m.exit and m.exit.reason == "max-hops"]
        return out

    wait_for(lambda: bool(stopped()), "dead-lettered max-hops")
    [m] = stopped()
    assert m.exit is not None and m.exit.kind is ExitKind.DEAD_LETTERED
    # One hop a crossing: on A's queue at 0, 2, 4 ... on B's at 1, 3, ...;
    # B's queue routes the 33rd, past the bound of 32 (engine/overflow.py).
    assert m.headers[HOPS] == "33" and m.queue == "loop"
    page = boards.c.browse("loop", Start.OLDEST, limit=100, section=Section.HISTORY)
    assert m in page.messages
    for c in (boards.s, boards.c):
        assert c.get_queue("loop").unprocessed == 0


def test_an_embedded_board_links_and_says_when_it_falls_behind(tmp_path: Path) -> None:
    """The engine's embedder runs links too (``Links`` over a ``Board``): a
    selector into a full remote queue makes the link fall behind, and
    link.behind names it with its lag; the metrics show each figure."""
    central = ServerThread(tmp_path / "central").start()
    try:
        with Client(central.address, timeout=30) as c, Board(tmp_path / "site") as board:
            c.create_queue("in", max_unprocessed=1)
            links = Links(board, behind=0.5).start()
            links.create(LinkSpec("central", central.address))
            board.create_queue(QueueSpec("out"))
            board.create_selector(SelectorSpec("out", destination="in", destination_link="central"))
            links.refresh_soon()
            board.post("out", [Message(tuple=(n,)) for n in range(3)])
            assert links.wait_connected("central", 30)

            def behind() -> list[Message]:
                return board.read("$sys", _template("link.behind"), 0, 10)

            wait_for(lambda: bool(behind()), "link.behind")
            name, waiting, _ = behind()[0].tuple[1:]
            assert (name, waiting) == ("central", 2)
            figures = {
                m.name: m.samples[0].value for m in LinksCollector(links).collect() if m.samples
            }
            assert figures["msgboard_link_connected"] == 1
            assert figures["msgboard_link_forwarded"] == 1
            assert figures["msgboard_link_lag_messages"] == 2
            assert figures["msgboard_link_lag_seconds"] > 0.5
            assert board.take("out", EVERYTHING, 0, 10) == []  # they wait in the outbox
    finally:
        central.stop()


def _template(name: str) -> Pattern:
    return make_pattern([(name, str, int, int)], None, "")


def test_a_missing_remote_queue_holds_messages_until_it_exists(boards: Boards) -> None:
    """Given a selector to a queue central does not have, I expect the
    messages to wait here and the link to say NOT_FOUND; once the queue is
    made they cross, and the link is connected again."""
    boards.s.create_queue("out")
    boards.s.create_link("central", boards.central.address)
    boards.s.create_selector("out", to="later", link="central")
    boards.s.post_many("out", [(n,) for n in range(3)], batch=3)
    wait_for(lambda: "NOT_FOUND" in boards.link().last_error, "NOT_FOUND shown")
    assert not boards.link().connected
    boards.c.create_queue("later")
    wait_for(lambda: boards.c.get_queue("later").unprocessed == 3, "the three")
    assert numbers(boards.c, "later") == [0, 1, 2]
    wait_for(lambda: boards.link().connected, "connected again")


def test_links_over_tls_with_a_client_certificate_or_a_token(tmp_path: Path) -> None:
    """Given central serving TLS and asking for client certificates, with a
    user known by its certificate and one by its token, I expect a link
    with the CA and the client certificate, and one with the CA and the
    token, both to forward; a link that does not trust central's CA to stay
    disconnected, saying so; and the secrets never shown."""
    ca = CA(tmp_path / "pki")
    server = ca.issue("localhost", server=True)
    client = ca.issue("site", client=True)
    users = tmp_path / "users.toml"
    users.write_text(
        "\n".join(
            [
                *("[[user]]", 'name = "site"', 'cert_cn = "site"'),
                *("[[user.allow]]", 'queues = "jobs*"', 'verbs = ["write"]'),
                *("[[user]]", 'name = "tok"', f'token_sha256 = "{token_hash("tok-t")}"'),
                *("[[user.allow]]", 'queues = "jobs*"', 'verbs = ["write", "read"]'),
                *("[[user]]", 'name = "root"', f'token_sha256 = "{token_hash("root-t")}"'),
                *("[[user.allow]]", 'queues = "*"', 'verbs = ["admin"]'),
            ]
        )
    )
    config = ServeConfig(
        listen="127.0.0.1:0",
        tls_cert=str(server.cert),
        tls_key=str(server.key),
        tls_client_ca=str(ca.pem),
        users=str(users),
    )
    central = ServerThread(tmp_path / "central", security=Security.build(config)).start()
    site = ServerThread(tmp_path / "site").start()
    other = CA(tmp_path / "other", name="other-ca")
    try:
        with (
            Client(
                central.address,
                token="root-t",
                tls_ca=str(ca.pem),
                tls_cert=str(client.cert),
                tls_key=str(client.key),
                timeout=30,
            ) as c,
            Client(site.address, timeout=30) as s,
        ):
            c.create_queue("jobs.in")
            s.create_queue("out")
            s.create_link(
                "mtls",
                central.address,
                tls_ca=str(ca.pem),
                tls_cert=str(client.cert),
                tls_key=str(client.key),
            )
            s.create_link(
                "token",
                central.address,
                token="tok-t",
                tls_ca=str(ca.pem),
                tls_cert=str(client.cert),
                tls_key=str(client.key),
            )
            s.create_link("untrusting", central.address, tls_ca=str(other.pem))
            s.create_selector("out", to="jobs.in", link="mtls")
            s.create_selector("out", to="jobs.in", link="token", op="copy")
            s.post("out", (1,))
            wait_for(lambda: c.get_queue("jobs.in").unprocessed == 2, "both across")
            views = {v.spec.name: v for v in s.list_links()}
            assert views["mtls"].connected and views["token"].connected
            wait_for(
                lambda: s.list_links()[-1].state == "disconnected", "the untrusting one refused"
            )
            assert "UNAVAILABLE" in s.list_links()[-1].last_error
            for v in views.values():
                assert v.spec.token == "" and v.spec.tls_key_pem == ""
            assert views["mtls"].spec.tls_ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    finally:
        site.stop()
        central.stop()


def test_a_served_board_s_metrics_show_each_link(tmp_path: Path) -> None:
    """msgboard serve --metrics-listen: each link's figures, labelled link."""
    site = ServerProcess(tmp_path / "site", "--metrics-listen", "127.0.0.1:0")
    central = ServerThread(tmp_path / "central").start()
    try:
        found = re.search(r"metrics on http://(\S+)/metrics", site.log.read_text())
        assert found, site.log.read_text()
        with Client(central.address, timeout=30) as c, Client(site.address, timeout=30) as s:
            c.create_queue("in")
            s.create_queue("out")
            s.create_link("central", central.address)
            s.create_selector("out", to="in", link="central")
            s.post_many("out", [(n,) for n in range(3)], batch=3)
            wait_for(lambda: c.get_queue("in").unprocessed == 3, "the three")
            label = (("link", "central"),)

            def figures() -> dict[str, float]:
                got = scrape(found.group(1))
                return {name: v for (name, labels), v in got.items() if labels == label}

            wait_for(lambda: figures().get("msgboard_link_forwarded_total") == 3, "counted")
            f = figures()
            assert f["msgboard_link_connected"] == 1
            assert f["msgboard_link_duplicates_total"] == 0
            assert f["msgboard_link_lag_messages"] == 0
            assert f["msgboard_link_in_flight"] == 0
    finally:
        central.stop()
        site.stop()
