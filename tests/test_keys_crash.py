"""kill -9 between a keyed post and its answer: the idempotent Publisher
sends the batch again with the same key once the board is back, and the
board stores it once.

The answer is lost for real: the client talks to the board through a TCP
proxy (``tests.proxy.Proxy``, muted) that drops every byte the board sends;
the post is seen durable by a second client connected straight to the
board, which is then killed with SIGKILL and started again on the same
port. ``violations`` is the invariant; its own test shows it catches each
way of breaking it."""

from __future__ import annotations

import threading
from pathlib import Path

from msgboard.client import Client
from msgboard.message import Message
from msgboard.testing import ServerProcess
from tests.proxy import Proxy
from tests.served import free_port


def violations(stored: list[Message], key: str, answered: int) -> list[str]:
    """What breaks "posted once": the key stored other than once, or the
    answer naming another seq than the stored one."""
    mine = [m.seq for m in stored if m.key == key]
    out = []
    if len(mine) != 1:
        out.append(f"key {key!r} stored {len(mine)} times (seqs {mine})")
    if mine and answered != mine[0]:
        out.append(f"answered seq {answered}, stored seq {mine[0]}")
    return out


def test_violations_catches_each_way_of_breaking_posted_once() -> None:
    """The checker: none stored, two stored, a wrong seq answered; and a
    clean case."""
    a, b = Message(key="k", seq=1), Message(key="k", seq=2)
    assert violations([], "k", 1) == ["key 'k' stored 0 times (seqs [])"]
    assert violations([a, b], "k", 1) == ["key 'k' stored 2 times (seqs [1, 2])"]
    assert violations([a], "k", 2) == ["answered seq 2, stored seq 1"]
    assert violations([a, Message(key="other", seq=2)], "k", 1) == []


def test_a_post_whose_answer_died_with_the_board_is_stored_once(tmp_path: Path) -> None:
    """Given an idempotent publisher posting through the proxy, when the
    board has stored a keyed post but its answer is lost and the board is
    killed with SIGKILL, then started again, I expect the publisher's post
    to return (it retried with the key) and the key stored exactly once."""
    data = tmp_path / "board"
    port = free_port()
    server = ServerProcess(data, "--listen", f"127.0.0.1:{port}")
    proxy = Proxy(f"127.0.0.1:{port}")
    answer: list[object] = []
    try:
        with Client(proxy.address, timeout=60) as c, Client(server.address) as direct:
            c.create_queue("jobs")
            with c.publisher(idempotent=True, retry_for=120) as pub:
                assert pub.post("jobs", ("warm",)) == 1
                proxy.mute()

                def post() -> None:
                    try:
                        answer.append(pub.post("jobs", ("once",), key="K"))
                    except Exception as e:  # reported by the assert below
                        answer.append(e)

                poster = threading.Thread(target=post)
                poster.start()
                for _ in range(600):  # up to a minute: seen durable by another client
                    if any(m.key == "K" for m in direct.read("jobs", max=10)):
                        break
                    poster.join(0.1)
                else:
                    raise AssertionError("the keyed post never reached the board")
                server.kill()
                assert not answer, "the answer got through the proxy"
                proxy.unmute()
                server = ServerProcess(data, "--listen", f"127.0.0.1:{port}")
                poster.join(120)
                assert not poster.is_alive(), "the publisher never came back"
        with Client(server.address) as c:
            stored = c.read("jobs", max=100)
        [seq] = answer
        assert isinstance(seq, int), seq
        assert violations(stored, "K", seq) == []
        assert [m.tuple for m in stored] == [("warm",), ("once",)]
    finally:
        proxy.close()
        server.stop()
