"""The checker of the kill tests across boards (tests/linkcheck.py), shown
each violation it looks for in arrivals made by hand, and a clean run
passing: a checker that cannot fail would pass every kill test."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

from msgboard.client import Client
from msgboard.message import Message
from msgboard.results import LinkView
from msgboard.spec import LinkSpec
from msgboard.testing import ServerThread
from tests.cluster import wait_until
from tests.jepsen import browsed
from tests.linkboards import arrivals
from tests.linkcheck import Arrived, Flow, behind, check, counts
from tests.workload import FAIL, OK, UNKNOWN, History, Op, Workload

#: Two boards: "site" (id S) moves its queue up to "central" (id C)'s
#: inbox through a translator that prefixes the address with "site.".
IDS = {"site": "S", "central": "C"}
FLOW = Flow("w", ("site", "up"), ("central", "inbox"), address="site.orders")


def post(key: str, seq: int, at: float, outcome: str = OK) -> Op:
    return Op("w-poster0", "post", key, "up", at, at + 0.5, outcome, seq if outcome == OK else 0)


#: Given: a, b and c answered OK (seqs 1-3), d's answer lost (stored as
#: seq 4), e refused.
HISTORY = [
    post("a", 1, 1),
    post("b", 2, 2),
    post("c", 3, 3),
    post("d", 0, 4, UNKNOWN),
    post("e", 0, 5, FAIL),
]


def arrival(name: str, origin_seq: int, seq: int, **kw: Any) -> Arrived:
    """``name``'s post (its body), arrived at central's inbox as ``seq``."""
    fields: dict[str, Any] = {
        "key": f"link:S:up:{origin_seq}",
        "body": name.encode(),
        "address": "site.orders",
    }
    fields.update(kw)
    return Arrived("central", "inbox", seq, **fields)


#: ... each arrived once, in order, at central's inbox.
CLEAN = [arrival("a", 1, 1), arrival("b", 2, 2), arrival("c", 3, 3), arrival("d", 4, 4)]


def test_a_clean_run_passes() -> None:
    assert check(HISTORY, [FLOW], CLEAN, IDS) == []
    # A post whose answer was lost may be missing.
    assert check(HISTORY, [FLOW], CLEAN[:3], IDS) == []


def test_a_lost_post_is_caught() -> None:
    found = check(HISTORY, [FLOW], [CLEAN[0], CLEAN[2], CLEAN[3]], IDS)
    assert found == [
        "lost: b posted to site/up (seq 2), answered OK at 2.500, did not arrive"
        " (site/up -> central/inbox)"
    ]


def test_a_duplicate_is_caught() -> None:
    # When c is stored again (a resend the destination took for new)
    found = check(HISTORY, [FLOW], [*CLEAN, arrival("c", 3, 5)], IDS)
    assert found == [
        "duplicate: c arrived 2 times (site/up -> central/inbox): central/inbox#3, central/inbox#5"
    ]
    # ... or an unknown post (d) arriving twice
    found = check(HISTORY, [FLOW], [*CLEAN, arrival("d", 4, 6)], IDS)
    assert counts(found) == {"duplicate": 1}


def test_arrivals_out_of_source_order_are_caught() -> None:
    swapped = [CLEAN[0], arrival("c", 3, 2), arrival("b", 2, 3), CLEAN[3]]
    assert check(HISTORY, [FLOW], swapped, IDS) == [
        "reordered: central/inbox#3 (origin seq 2) arrived after central/inbox#2"
        " (origin seq 3) (site/up -> central/inbox)"
    ]


def test_a_changed_body_address_or_header_is_caught() -> None:
    # When b's body arrives other than posted
    found = check(HISTORY, [FLOW], [CLEAN[0], arrival("b", 2, 2, body=b"b?"), *CLEAN[2:]], IDS)
    assert found == [
        "changed: b at central/inbox#2: the body is b'b?', posted b'b' (site/up -> central/inbox)"
    ]
    # When the translator's prefix is missing
    found = check(HISTORY, [FLOW], [arrival("a", 1, 1, address="orders"), *CLEAN[1:]], IDS)
    assert found == [
        "changed: a at central/inbox#1: the address is 'orders', not 'site.orders'"
        " (site/up -> central/inbox)"
    ]
    # When a header the translator sets is missing
    flow = dataclasses.replace(FLOW, headers={"x-site": "1"})
    ok = [dataclasses.replace(a, headers={"x-site": "1"}) for a in CLEAN]
    assert check(HISTORY, [flow], ok, IDS) == []
    found = check(HISTORY, [flow], [*ok[:3], CLEAN[3]], IDS)
    assert found == [
        "changed: d at central/inbox#4: header x-site is None, not '1' (site/up -> central/inbox)"
    ]
    # When it is not keyed by its origin (its headers say where it came from)
    origin = {"x-origin-board": "S", "x-origin-queue": "up", "x-origin-seq": "4"}
    found = check(HISTORY, [FLOW], [*CLEAN[:3], arrival("d", 4, 4, key="d", headers=origin)], IDS)
    assert found == [
        "changed: d at central/inbox#4: its key 'd' is no link key (a resend would be"
        " stored again) (site/up -> central/inbox)"
    ]


def test_arrivals_no_post_explains_are_caught() -> None:
    # From a board no flow comes from
    other = Arrived("central", "inbox", 9, "link:X:up:1", b"z", "site.orders")
    assert check(HISTORY, [FLOW], [*CLEAN, other], IDS) == [
        "stray: central/inbox#9 (link:X:up:1) comes from no flow's source"
    ]
    # A refused post (e) that arrived anyway
    found = check(HISTORY, [FLOW], [*CLEAN, arrival("e", 5, 5)], IDS)
    assert found == [
        "stray: central/inbox#5 (link:S:up:5) is e, which w never posted (every post of it"
        " was refused) (site/up -> central/inbox)"
    ]


def test_the_origin_is_read_from_the_origin_headers_first() -> None:
    # A link keys by its outbox; the headers name the source queue and seq.
    def via(a: Arrived) -> Arrived:
        o = a.origin
        assert o is not None
        heads = {"x-origin-board": "S", "x-origin-queue": "up", "x-origin-seq": str(o[2])}
        return dataclasses.replace(a, key=f"link:S:$link.sel-1:{a.seq + 10}", headers=heads)

    assert check(HISTORY, [FLOW], [via(a) for a in CLEAN], IDS) == []
    swapped = [via(a) for a in (CLEAN[0], arrival("c", 3, 2), arrival("b", 2, 3), CLEAN[3])]
    assert counts(check(HISTORY, [FLOW], swapped, IDS)) == {"reordered": 1}
    elsewhere = dataclasses.replace(
        via(CLEAN[1]), headers={**via(CLEAN[1]).headers, "x-origin-queue": "other"}
    )
    assert counts(
        check(HISTORY, [FLOW], [via(CLEAN[0]), elsewhere, *map(via, CLEAN[2:])], IDS)
    ) == {
        "lost": 1,
        "stray": 1,
    }


def test_the_post_is_found_by_seq_then_key_header_then_body() -> None:
    # An arrival whose origin seq no OK post has: its key header names it
    d = arrival("d", 4, 4, body=b"d", headers={"x-origin-key": "d"})
    assert check(HISTORY, [FLOW], [*CLEAN[:3], d], IDS) == []
    # An origin seq that names another answered post: that post, changed
    found = check(HISTORY, [FLOW], [arrival("b", 1, 1), *CLEAN[1:]], IDS)
    assert found == [
        "changed: a at central/inbox#1: the body is b'b', posted b'a' (site/up -> central/inbox)"
    ]


def test_each_flow_is_judged_on_its_own() -> None:
    # A COPY to two sites: one of them misses b
    news = [
        Flow("n", ("central", "news"), ("site1", "news")),
        Flow("n", ("central", "news"), ("site2", "news")),
    ]
    ids = {"central": "C", "site1": "S1", "site2": "S2"}
    history = [Op("n-streamer", "post", k, "news", i, i + 1, OK, i) for i, k in enumerate("ab", 1)]

    def at(site: str, key: str, seq: int) -> Arrived:
        return Arrived(site, "news", seq, f"link:C:news:{seq}", key.encode())

    both = [at("site1", "a", 1), at("site1", "b", 2), at("site2", "a", 1), at("site2", "b", 2)]
    assert check(history, news, both, ids) == []
    found = check(history, news, both[:3], ids)
    assert found == [
        "lost: b posted to central/news (seq 2), answered OK at 3.000, did not arrive"
        " (central/news -> site2/news)"
    ]


def test_violations_on_real_boards_are_caught(tmp_path: Path) -> None:
    """The checker reads what real boards hold: given a site whose posts a
    hand-made forwarder carries to a central board with link keys, as a
    link does, I expect a clean copy to pass, and a message it skips,
    stores twice (under another origin seq), swaps or garbles to be
    caught."""
    site = ServerThread(tmp_path / "site").start()
    central = ServerThread(tmp_path / "central").start()
    try:
        h = History()
        with Client(site.address, timeout=30) as c:
            c.create_queue("up")
        w = Workload(h, site.address, name="w", queues=("up",), roles=("poster0",), topic="orders")
        w.start()
        wait_until("ten posts answered", lambda: h.count("post") >= 10, 60)
        w.stop()
        with Client(site.address, timeout=30) as c:
            posted = [m for _, m in browsed(c, "up")]

        def forward(queue: str, messages: list[Message]) -> list[Arrived]:
            """Posts ``messages`` to central's ``queue`` as a link would."""
            with Client(central.address, timeout=30) as c:
                c.create_queue(queue)
                for m in messages:
                    c.post(queue, body=m.body, address=m.address, key=m.key, headers=m.headers)
            return arrivals({"central": central.address}, [("central", queue)])

        def carried(m: Message, seq: int | None = None, **kw: Any) -> Message:
            fields: dict[str, Any] = {
                "body": m.body,
                "address": f"site.{m.address}",
                "key": f"link:S:up:{seq or m.seq}",
                "headers": {"x-origin-key": m.key},
            }
            fields.update(kw)
            return Message(**fields)

        flow = Flow("w", ("site", "up"), ("central", "clean"), address="site.orders")
        good = [carried(m) for m in posted]
        assert check(h.ops(), [flow], forward("clean", good), IDS) == []

        def verdict(queue: str, messages: list[Message]) -> Counter[str]:
            f = dataclasses.replace(flow, destination=("central", queue))
            return counts(check(h.ops(), [f], forward(queue, messages), IDS))

        assert verdict("skipped", good[:4] + good[5:]) == {"lost": 1}
        twice = [*good, carried(posted[3], seq=9999)]
        assert verdict("twice", twice) == {"duplicate": 1}
        assert verdict("swapped", [good[1], good[0], *good[2:]]) == {"reordered": 1}
        garbled = [*good[:2], carried(posted[2], body=b"garbled"), *good[3:]]
        assert verdict("garbled", garbled) == {"changed": 1}
        untranslated = [*good[:2], carried(posted[2], address="orders"), *good[3:]]
        assert verdict("untranslated", untranslated) == {"changed": 1}
    finally:
        site.stop()
        central.stop()


def test_a_link_still_behind_once_everything_arrived_is_caught() -> None:
    def link(**kw: Any) -> LinkView:
        return LinkView(LinkSpec("central", "127.0.0.1:1"), "connected", True, **kw)

    assert behind({"site": [link(forwarded=9, duplicates=2)]}) == []
    assert behind({"site": [link(lag_messages=3, in_flight=1)]}) == [
        "behind: link central of site counts 3 waiting and 1 in flight once everything arrived"
    ]
    down = LinkView(LinkSpec("central", "127.0.0.1:1"), "disconnected", False, last_error="gone")
    assert behind({"site": [down]}) == ["behind: link central of site is disconnected: gone"]
