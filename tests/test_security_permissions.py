"""Who may do what: one table of users x RPCs x queues, run through a real
server over TLS with tokens; filtered listings; per-user caps; snapshots
confined to the snapshot directory.

Given a board with TLS, a users file and a snapshot directory, and users
who each hold one verb on ``jobs*`` (and an admin, and a user with no
rules), when each user makes each call, I expect exactly the users the
issue's rules allow to get past the gate, and the others PERMISSION_DENIED
naming user, verb and queue.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from msgboard.client import Client
from msgboard.config import ServeConfig
from msgboard.errors import (
    FailedPrecondition,
    InvalidArgument,
    MsgboardError,
    PermissionDenied,
    ResourceExhausted,
)
from msgboard.message import Message
from msgboard.security import Security
from msgboard.security.auth import token_hash
from msgboard.security.permissions import RPCS
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from tests.pki import CA

#: name -> the verbs it holds on "jobs*" ("admin": board-wide; none: no rule).
USERS: dict[str, list[str]] = {
    "root": ["admin"],
    "reader": ["read"],
    "writer": ["write"],
    "manager": ["manage"],
    "alice": ["read", "write", "manage"],
    "nobody": [],
}


def users_file(path: Path, users: dict[str, list[str]] = USERS) -> Path:
    lines = []
    for name, verbs in users.items():
        lines += ["[[user]]", f'name = "{name}"', f'token_sha256 = "{token_hash(name + "-t")}"']
        if verbs:
            glob = "*" if verbs == ["admin"] else "jobs*"
            quoted = ", ".join(f'"{v}"' for v in verbs)
            lines += ["[[user.allow]]", f'queues = "{glob}"', f"verbs = [{quoted}]"]
        lines.append("")
    path.write_text("\n".join(lines))
    return path


class Secured:
    """A board with TLS, the users above and a snapshot directory."""

    def __init__(self, tmp: Path, **caps: int) -> None:
        self.ca = CA(tmp / "pki")
        cert = self.ca.issue("localhost", server=True)
        self.snapshots = tmp / "snaps"
        config = ServeConfig(
            listen="127.0.0.1:0",
            tls_cert=str(cert.cert),
            tls_key=str(cert.key),
            users=str(users_file(tmp / "users.toml")),
            snapshot_dir=str(self.snapshots),
            **caps,
        )
        self.server = ServerThread(tmp / "board", security=Security.build(config)).start()

    def client(self, user: str) -> Client:
        return Client(self.server.address, token=user + "-t", tls_ca=str(self.ca.pem), timeout=20)


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Secured]:
    b = Secured(tmp_path)
    try:
        with b.client("root") as root:
            for q in ("jobs", "jobs.done", "other"):
                root.create_queue(q)
        yield b
    finally:
        b.server.stop()


Call = Callable[[Client, Client], Any]


def _fresh_selector(root: Client, source: str) -> str:
    return root.create_selector(source, to="", credit=1).id


def _durable_terminal(root: Client) -> str:
    found = [s.id for s in root.list_selectors("jobs") if not s.spec.destination]
    return found[0] if found else root.create_selector("jobs", credit=5).id


def _post_stream(c: Client, queue: str) -> None:
    c.post_many(queue, [(1,), (2,)], batch=1)


def _subscribe(c: Client, queue: str = "", selector: str = "") -> None:
    with c.subscribe(queue, selector=selector, credit=1):
        pass


def _create_dead_lettered(c: Client, root: Client) -> None:
    c.create_queue("jobs.dl", dead_letter="other")


def _crossing(link: str) -> Call:
    """A selector from jobs to queue "far" across ``link`` (which root makes:
    an unreachable address is no error)."""

    def call(c: Client, root: Client) -> None:
        root.create_link(link, "127.0.0.1:9")
        c.create_selector("jobs", to="far", link=link)

    return call


def _pulling(link: str) -> Call:
    """A pull into jobs from queue "far" on ``link``'s board (which root
    makes: an unreachable address is no error)."""

    def call(c: Client, root: Client) -> None:
        root.create_link(link, "127.0.0.1:9")
        c.create_selector("far", to="jobs", source_link=link)

    return call


def _fresh_pull(root: Client, into: str) -> str:
    """A pull made by root into ``into`` (its id)."""
    root.create_link("central", "127.0.0.1:9")
    return root.create_selector("far", to=into, source_link="central").id


def _bounce(c: Client, root: Client) -> None:
    c.create_selector("jobs", op="bounce")


def _resubmit(c: Client, root: Client, origin: str) -> None:
    """A dead letter of ``origin`` waiting on jobs, resubmitted by ``c``."""
    seq = root.post("jobs", (1,), headers={"x-dead-letter-queue": origin})
    c.move_messages("jobs", seqs=[seq])


#: (RPC, what the call does, the users allowed). Every RPC appears; some
#: several times, across queues.
TABLE: list[tuple[str, str, Call, set[str]]] = [
    ("CreateQueue", "jobs.new", lambda c, r: c.create_queue("jobs.new"), {"manager", "alice"}),
    ("CreateQueue", "other.new", lambda c, r: c.create_queue("other.new"), set()),
    ("CreateQueue", "dead letter to other", _create_dead_lettered, set()),
    ("GetQueue", "jobs", lambda c, r: c.get_queue("jobs"), {"reader", "manager", "alice"}),
    ("GetQueue", "other", lambda c, r: c.get_queue("other"), set()),
    ("ListQueues", "", lambda c, r: c.list_queues(), set(USERS)),
    (
        "DeleteQueue",
        "jobs.tmp",
        lambda c, r: (r.create_queue("jobs.tmp"), c.delete_queue("jobs.tmp")),
        {"manager", "alice"},
    ),
    (
        "DeleteQueue",
        "other.tmp",
        lambda c, r: (r.create_queue("other.tmp"), c.delete_queue("other.tmp")),
        set(),
    ),
    ("Post", "jobs", lambda c, r: c.post("jobs", (1,)), {"writer", "alice"}),
    ("Post", "other", lambda c, r: c.post("other", (1,)), set()),
    ("PostStream", "jobs", lambda c, r: _post_stream(c, "jobs"), {"writer", "alice"}),
    ("PostStream", "other", lambda c, r: _post_stream(c, "other"), set()),
    ("Take", "jobs", lambda c, r: c.take("jobs"), {"reader", "alice"}),
    ("Take", "other", lambda c, r: c.take("other"), set()),
    ("Read", "jobs", lambda c, r: c.read("jobs"), {"reader", "alice"}),
    ("Browse", "jobs", lambda c, r: c.browse("jobs"), {"reader", "alice"}),
    ("Browse", "other", lambda c, r: c.browse("other"), set()),
    ("Ack", "jobs", lambda c, r: c.ack("jobs", [987654]), {"reader", "alice"}),
    ("Stats", "jobs", lambda c, r: c.stats("jobs"), {"reader", "alice"}),
    ("Stats", "the board", lambda c, r: c.stats(), set()),
    (
        "CreateSelector",
        "jobs -> jobs.done",
        lambda c, r: c.create_selector("jobs", to="jobs.done"),
        {"alice"},
    ),
    ("CreateSelector", "jobs -> other", lambda c, r: c.create_selector("jobs", to="other"), set()),
    ("CreateSelector", "other -> jobs", lambda c, r: c.create_selector("other", to="jobs"), set()),
    ("CreateSelector", "jobs, terminal", lambda c, r: c.create_selector("jobs"), {"alice"}),
    ("CreateSelector", "jobs, bounce", _bounce, set()),
    # Across a link the destination is LINK:QUEUE: write on "jobs.site:far".
    ("CreateSelector", "jobs -> jobs.site:far", _crossing("jobs.site"), {"alice"}),
    ("CreateSelector", "jobs -> central:far", _crossing("central"), set()),
    # A pull reads LINK:QUEUE and fills (manage, write) its local queue.
    ("CreateSelector", "jobs.site:far -> jobs", _pulling("jobs.site"), {"alice"}),
    ("CreateSelector", "central:far -> jobs", _pulling("central"), set()),
    (
        "GetSelector",
        "of jobs",
        lambda c, r: c.get_selector(_durable_terminal(r)),
        {"reader", "manager", "alice"},
    ),
    (
        "GetSelector",
        "of other",
        lambda c, r: c.get_selector(_fresh_selector(r, "other")),
        set(),
    ),
    ("ListSelectors", "all", lambda c, r: c.list_selectors(), set(USERS)),
    (
        "ListSelectors",
        "jobs",
        lambda c, r: c.list_selectors("jobs"),
        {"reader", "manager", "alice"},
    ),
    ("ListSelectors", "other", lambda c, r: c.list_selectors("other"), set()),
    (
        "DeleteSelector",
        "of jobs",
        lambda c, r: c.delete_selector(_fresh_selector(r, "jobs")),
        {"manager", "alice"},
    ),
    (
        "DeleteSelector",
        "of other",
        lambda c, r: c.delete_selector(_fresh_selector(r, "other")),
        set(),
    ),
    (
        "DeleteSelector",
        "a pull into jobs",
        lambda c, r: c.delete_selector(_fresh_pull(r, "jobs")),
        {"manager", "alice"},
    ),
    (
        "DeleteSelector",
        "a pull into other",
        lambda c, r: c.delete_selector(_fresh_pull(r, "other")),
        set(),
    ),
    ("Subscribe", "jobs", lambda c, r: _subscribe(c, "jobs"), {"reader", "alice"}),
    ("Subscribe", "other", lambda c, r: _subscribe(c, "other"), set()),
    (
        "Subscribe",
        "attach to a selector of jobs",
        lambda c, r: _subscribe(c, selector=_durable_terminal(r)),
        {"reader", "alice"},
    ),
    ("Snapshot", "a name", lambda c, r: c.snapshot(f"snap-{c.connection.token}"), set()),
    ("ListConsumers", "all", lambda c, r: c.list_consumers(), set()),
    ("ListConsumers", "of jobs", lambda c, r: c.list_consumers("jobs"), set()),
    ("KickConsumer", "an unknown id", lambda c, r: c.kick_consumer("con-999"), set()),
    ("DropDamaged", "a sound record", lambda c, r: c.drop_damaged("jobs", 1), set()),
    ("CreateLink", "a link", lambda c, r: c.create_link("jobs.l", "127.0.0.1:9"), set()),
    ("ListLinks", "all", lambda c, r: c.list_links(), set()),
    ("DeleteLink", "an unknown link", lambda c, r: c.delete_link("jobs.none"), set()),
    ("PurgeQueue", "jobs", lambda c, r: c.purge_queue("jobs"), {"manager", "alice"}),
    ("PurgeQueue", "other", lambda c, r: c.purge_queue("other"), set()),
    (
        "MoveMessages",
        "jobs -> jobs.done",
        lambda c, r: c.move_messages("jobs", "jobs.done", seqs=[987654]),
        {"manager", "alice"},
    ),
    (
        "MoveMessages",
        "jobs -> other",
        lambda c, r: c.move_messages("jobs", "other", seqs=[987654]),
        set(),
    ),
    (
        "MoveMessages",
        "other -> jobs",
        lambda c, r: c.move_messages("other", "jobs", seqs=[987654]),
        set(),
    ),
    (
        "MoveMessages",
        "resubmit from jobs to jobs.done",
        lambda c, r: _resubmit(c, r, "jobs.done"),
        {"manager", "alice"},
    ),
    ("MoveMessages", "resubmit from jobs to other", lambda c, r: _resubmit(c, r, "other"), set()),
    (
        "DeleteMessages",
        "jobs",
        lambda c, r: c.delete_messages("jobs", seqs=[987654]),
        {"manager", "alice"},
    ),
    ("DeleteMessages", "other", lambda c, r: c.delete_messages("other", seqs=[987654]), set()),
    (
        "ReleaseMessages",
        "jobs",
        lambda c, r: c.release_messages("jobs", [987654]),
        {"manager", "alice"},
    ),
    ("ReleaseMessages", "other", lambda c, r: c.release_messages("other", [987654]), set()),
    ("ListLeases", "jobs", lambda c, r: c.list_leases("jobs"), {"manager", "alice"}),
    ("ListLeases", "other", lambda c, r: c.list_leases("other"), set()),
    ("ListLeases", "all", lambda c, r: c.list_leases(), set()),
]


def test_the_table_covers_every_rpc() -> None:
    methods = {m.name for m in pb.DESCRIPTOR.services_by_name["Board"].methods}
    assert set(RPCS) == methods
    assert {row[0] for row in TABLE} == methods


@pytest.mark.parametrize(
    ("rpc", "what", "call", "allowed"), TABLE, ids=[f"{r[0]}:{r[1]}" for r in TABLE]
)
def test_who_may_call_what(
    board: Secured, rpc: str, what: str, call: Call, allowed: set[str]
) -> None:
    with board.client("root") as root:
        for user in USERS:
            with board.client(user) as c:
                may = user in allowed or user == "root"
                try:
                    call(c, root)
                except PermissionDenied as e:
                    assert not may, f"{user} denied {rpc} {what}: {e}"
                    assert f"user {user!r} may not" in str(e)
                    assert "queue" in str(e) or "the whole board" in str(e)
                except MsgboardError as e:
                    # Past the gate; the board itself answered (an unknown
                    # lease, an existing queue...).
                    assert may, f"{user} got {e!r} for {rpc} {what}, not PERMISSION_DENIED"
                else:
                    assert may, f"{user} was allowed {rpc} {what}"


def test_listings_show_only_what_the_caller_may_read_or_manage(board: Secured) -> None:
    with board.client("root") as root:
        root.create_selector("jobs", to="jobs.done")
        root.create_selector("other", credit=1)
        names: dict[str, set[str]] = {}
        sources: dict[str, set[str]] = {}
        for user in USERS:
            with board.client(user) as c:
                names[user] = {q.spec.name for q in c.list_queues()}
                sources[user] = {s.spec.source for s in c.list_selectors()}
    jobs = {"jobs", "jobs.done"}
    assert names == {
        "root": jobs | {"other"},
        "reader": jobs,
        "writer": set(),
        "manager": jobs,
        "alice": jobs,
        "nobody": set(),
    }
    assert sources["root"] == {"jobs", "other"}
    assert sources["reader"] == sources["manager"] == {"jobs"}
    assert sources["writer"] == sources["nobody"] == set()


def test_a_post_stream_ends_at_the_first_batch_it_may_not_post(board: Secured) -> None:
    with board.client("alice") as c:
        with pytest.raises(PermissionDenied, match="may not write queue 'other'"):
            c.post_many("jobs", [Message(tuple=(i,)) for i in range(3)], batch=1)
            c.post_many("other", [(1,)])
        with c.publisher() as pub:
            assert pub.post("jobs", (1,)) > 0
            with pytest.raises(PermissionDenied):
                pub.post("other", (2,))


def test_snapshots_stay_under_the_snapshot_dir(board: Secured, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (board.snapshots / "link").symlink_to(outside)
    with board.client("root") as root:
        snap = root.snapshot("nightly/one")
        assert snap.path == str(board.snapshots / "nightly" / "one")
        assert (board.snapshots / "nightly" / "one" / "data.mdb").exists()
        for bad in (str(tmp_path / "abs"), "../escape", "a/../../escape", "link/x", "link", ""):
            with pytest.raises(InvalidArgument):
                root.snapshot(bad)
        assert list(outside.iterdir()) == []
        assert not (tmp_path / "abs").exists() and not (tmp_path / "escape").exists()


def test_a_board_with_users_and_no_snapshot_dir_refuses_snapshots(tmp_path: Path) -> None:
    config = ServeConfig(listen="127.0.0.1:0", users=str(users_file(tmp_path / "u.toml")))
    server = ServerThread(tmp_path / "board", security=Security.build(config)).start()
    try:
        with Client(server.address, token="root-t") as root:
            with pytest.raises(FailedPrecondition, match="snapshot_dir"):
                root.snapshot(str(tmp_path / "snap"))
            with pytest.raises(FailedPrecondition):
                root.snapshot("snap")
        assert not (tmp_path / "snap").exists()
    finally:
        server.stop()


def _wait_for(test: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 20
    while not test():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


@contextlib.contextmanager
def _secured(tmp_path: Path, **caps: int) -> Iterator[Secured]:
    b = Secured(tmp_path, **caps)
    try:
        with b.client("root") as root:
            root.create_queue("jobs")
        yield b
    finally:
        b.server.stop()


def test_subscribe_consumers_per_user_are_capped(tmp_path: Path) -> None:
    with _secured(tmp_path, max_consumers=2) as b, b.client("alice") as c, b.client("reader") as r:
        first, second = c.subscribe("jobs"), c.subscribe("jobs")
        with pytest.raises(ResourceExhausted, match="max_consumers"):
            c.subscribe("jobs")
        r.subscribe("jobs").close()  # another user has caps of its own
        first.close()
        c.subscribe("jobs").close()  # room again
        second.close()


def test_open_streams_per_user_are_capped(tmp_path: Path) -> None:
    with _secured(tmp_path, max_streams=2) as b, b.client("alice") as c:
        pub = c.publisher()
        pub.post("jobs", (1,))
        sub = c.subscribe("jobs")
        with pytest.raises(ResourceExhausted, match="max_streams"):
            c.post_many("jobs", [(2,)])
        pub.close()
        assert c.post_many("jobs", [(3,)])
        sub.close()


def test_blocked_takes_per_user_are_capped(tmp_path: Path) -> None:
    with _secured(tmp_path, max_waits=1) as b, b.client("alice") as c, b.client("root") as root:
        got: list[Any] = []
        t = threading.Thread(target=lambda: got.append(c.take("jobs", timeout=30)))
        t.start()
        _wait_for(lambda: root.get_queue("jobs").waiting == 1)
        with pytest.raises(ResourceExhausted, match="max_waits"):
            c.read("jobs", timeout=30)
        assert c.take("jobs") == []  # a Take that does not wait is not capped
        root.post("jobs", ("go",))
        t.join(30)
        assert [m.tuple for m in got[0]] == [("go",)]
        assert c.read("jobs", timeout=0.01) == []  # the cap is free again


def _quickstart() -> list[list[str]]:
    """The README quickstart's msgboard commands, as argument lists."""
    import shlex

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = readme.split("## Quickstart", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    return [shlex.split(line)[1:] for line in block.splitlines() if line.startswith("msgboard ")]


def test_the_readme_quickstart_over_tls_with_a_token(
    board: Secured, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from msgboard.cli import main

    monkeypatch.setenv("MSGBOARD_SERVER", board.server.address)
    monkeypatch.setenv("MSGBOARD_TLS_CA", str(board.ca.pem))
    commands = _quickstart()
    assert commands[0][:2] == ["queue", "create"] and commands[-1] == ["stats"]
    # alice (read, write, manage on jobs*) runs it all but the whole board's
    # stats, which are for admins; root runs all of it.
    for user, denied in (("alice", [["stats"]]), ("root", [])):
        monkeypatch.setenv("MSGBOARD_TOKEN", f"{user}-t")
        with board.client("root") as root:
            root.delete_queue("jobs")
        for args in commands:
            code = main(args)
            err = capsys.readouterr().err
            if args in denied:
                assert code == 1 and "PERMISSION_DENIED" in err, err
            else:
                assert code == 0, (user, args, err)
    monkeypatch.setenv("MSGBOARD_TOKEN", "nobody-t")
    assert main(commands[1]) == 1
    assert "PERMISSION_DENIED: user 'nobody' may not write queue 'jobs'" in capsys.readouterr().err


def test_a_denied_call_is_announced_on_sys(board: Secured) -> None:
    """Every user reads $sys; a refused call shows there as user.denied."""
    with board.client("writer") as c:
        with pytest.raises(PermissionDenied):
            c.take("other")
        deadline = time.monotonic() + 10
        found: list[Any] = []
        while not found and time.monotonic() < deadline:
            found = c.read("$sys", address="user.denied", timeout=1)
        assert found and found[0].tuple[1] == "writer"
