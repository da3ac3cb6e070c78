"""The wire contract, as a client written from the proto alone meets it:
raw gRPC stubs of ``msgboard.v1`` (and raw bytes), never the Python
client, which would hide what the wire says. Issue 35, items 14 to 18."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from msgboard import codec
from msgboard.config import ServeConfig
from msgboard.message import Message
from msgboard.security import Security
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from tests.pki import CA
from tests.test_error_details import _status, _unpacked
from tests.test_security_permissions import users_file

Call = Callable[[pb_grpc.BoardStub], Any]


@pytest.fixture
def stub(server: ServerThread) -> Iterator[pb_grpc.BoardStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.BoardStub(channel)


def _refused(call: Callable[[], Any], code: grpc.StatusCode) -> tuple[str, dict[str, str], list]:  # type: ignore[type-arg]
    """The text, ErrorInfo metadata and BadRequest violations of a call
    that must fail with ``code``."""
    err, st = _status(call)
    assert err.code() == code, st.message
    info, violations = _unpacked(st.details)
    return st.message, dict(info.metadata), violations


def _post(stub: pb_grpc.BoardStub, queue: str, n: int) -> None:
    msgs = [Message(tuple=("m", i)) for i in range(n)]
    stub.Post(pb.PostRequest(queue=queue, messages=codec.messages_to_pb(msgs)))


def _waiting(stub: pb_grpc.BoardStub, queue: str) -> int:
    return int(stub.GetQueue(pb.GetQueueRequest(name=queue)).unprocessed)


# -- 14: an empty DeleteMessages or MoveMessages acts on nothing --------------


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.DeleteMessages(pb.DeleteMessagesRequest(queue="jobs")),
        lambda s: s.DeleteMessages(pb.DeleteMessagesRequest(queue="jobs", limit=2)),
        lambda s: s.MoveMessages(pb.MoveMessagesRequest(source="jobs", destination="parked")),
    ],
)
def test_a_request_without_seqs_pattern_or_all_is_refused(
    stub: pb_grpc.BoardStub, call: Call
) -> None:
    """Given a queue of 5, when a client forgets the seqs of a delete or a
    move, I expect INVALID_ARGUMENT naming `seqs`, and all 5 still there."""
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="jobs")))
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="parked")))
    _post(stub, "jobs", 5)
    text, _, violations = _refused(lambda: call(stub), grpc.StatusCode.INVALID_ARGUMENT)
    assert text.startswith("seqs: give the seqs, a pattern or all")
    assert [f for f, _ in violations] == ["seqs"]
    assert _waiting(stub, "jobs") == 5


def test_an_explicit_all_acts_and_all_with_seqs_is_refused(stub: pb_grpc.BoardStub) -> None:
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="jobs")))
    _post(stub, "jobs", 5)
    _, _, violations = _refused(
        lambda: stub.DeleteMessages(pb.DeleteMessagesRequest(queue="jobs", seqs=[1], all=True)),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert [f for f, _ in violations] == ["all"]
    r = stub.DeleteMessages(pb.DeleteMessagesRequest(queue="jobs", all=True, limit=2))
    assert list(r.seqs) == [1, 2]
    assert _waiting(stub, "jobs") == 3


# -- 15: a request that is not valid protobuf ----------------------------------


def _raw(server: ServerThread, method: str, data: bytes) -> Callable[[], Any]:
    channel = grpc.insecure_channel(server.address)
    call = channel.unary_unary(f"/msgboard.v1.Board/{method}")
    return lambda: call(data, timeout=20)


# A PostRequest whose queue (field 1, a string) is the bytes ff fe: not UTF-8.
_BAD_UTF8 = b"\x0a\x02\xff\xfe"
# A CreateQueueRequest cut inside its spec: length 10, 2 bytes follow.
_TRUNCATED = b"\x0a\x0a\x0a\x02"


@pytest.mark.parametrize(
    ("method", "data"), [("Post", _BAD_UTF8), ("CreateQueue", _TRUNCATED), ("Take", b"\xff")]
)
def test_bytes_that_are_not_protobuf_are_invalid_argument(
    server: ServerThread, caplog: pytest.LogCaptureFixture, method: str, data: bytes
) -> None:
    """Given bytes that do not parse as the request, I expect
    INVALID_ARGUMENT with the ErrorInfo details every bad input has, a text
    naming the request, and no traceback logged."""
    with caplog.at_level(logging.ERROR):
        text, _, _ = _refused(_raw(server, method, data), grpc.StatusCode.INVALID_ARGUMENT)
    assert text.startswith(f"request: {len(data)} bytes that are not a valid {method} request")
    assert not [r for r in caplog.records if r.exc_info], caplog.text


def test_a_bad_request_inside_a_stream_ends_it_invalid_argument(server: ServerThread) -> None:
    """Given a PostStream whose second request does not parse, I expect the
    first batch stored and the stream ended INVALID_ARGUMENT."""
    channel = grpc.insecure_channel(server.address)
    pb_grpc.BoardStub(channel).CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="jobs")))
    good = pb.PostStreamRequest(
        queue="jobs", batch_id=1, messages=codec.messages_to_pb([Message(tuple=("a",))])
    ).SerializeToString()
    stream = channel.stream_stream("/msgboard.v1.Board/PostStream")
    answers = stream(iter([good, _TRUNCATED]), timeout=20)
    with pytest.raises(grpc.RpcError) as e:
        for _ in answers:
            pass
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid PostStream request" in (e.value.details() or "")
    got = pb_grpc.BoardStub(channel).GetQueue(pb.GetQueueRequest(name="jobs"))
    assert got.unprocessed == 1


# -- 17: the board's own queues: one rule, filled metadata ------------------


@pytest.fixture
def users_board(tmp_path: Path) -> Iterator[tuple[ServerThread, CA]]:
    ca = CA(tmp_path / "pki")
    cert = ca.issue("localhost", server=True)
    config = ServeConfig(
        listen="127.0.0.1:0",
        tls_cert=str(cert.cert),
        tls_key=str(cert.key),
        users=str(users_file(tmp_path / "users.toml", {"root": ["admin"]})),
    )
    server = ServerThread(tmp_path / "board", security=Security.build(config)).start()
    try:
        yield server, ca
    finally:
        server.stop()


_SYS_CALLS: list[tuple[str, str, Call]] = [
    ("PurgeQueue", "manage", lambda s: s.PurgeQueue(pb.PurgeQueueRequest(queue="$sys"))),
    (
        "MoveMessages",
        "manage",
        lambda s: s.MoveMessages(pb.MoveMessagesRequest(source="$sys", seqs=[1])),
    ),
    (
        "DeleteMessages",
        "manage",
        lambda s: s.DeleteMessages(pb.DeleteMessagesRequest(queue="$sys", seqs=[1])),
    ),
    (
        "ReleaseMessages",
        "manage",
        lambda s: s.ReleaseMessages(pb.ReleaseMessagesRequest(queue="$sys", seqs=[1])),
    ),
    ("ListLeases", "manage", lambda s: s.ListLeases(pb.ListLeasesRequest(queue="$sys"))),
    ("DeleteQueue", "manage", lambda s: s.DeleteQueue(pb.DeleteQueueRequest(name="$sys"))),
    (
        "Post",
        "write",
        lambda s: s.Post(
            pb.PostRequest(queue="$sys", messages=[pb.Message(tuple=[pb.FieldValue(string="x")])])
        ),
    ),
]


def test_the_boards_own_queue_is_refused_alike_with_its_metadata(
    users_board: tuple[ServerThread, CA],
) -> None:
    """Given a board with users, when its admin purges, moves, deletes,
    releases, lists the leases of, deletes or posts to `$sys`, I expect
    each PERMISSION_DENIED (`Reserved`) with ErrorInfo naming the user, the
    verb and the queue."""
    server, ca = users_board
    creds = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(ca.pem.read_bytes()),
        grpc.access_token_call_credentials("root-t"),
    )
    with grpc.secure_channel(
        server.address, creds, options=[("grpc.ssl_target_name_override", "localhost")]
    ) as channel:
        stub = pb_grpc.BoardStub(channel)
        for name, verb, call in _SYS_CALLS:
            err, st = _status(lambda call=call: call(stub))  # type: ignore[misc]
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED, (name, st.message)
            info, _ = _unpacked(st.details)
            assert info.reason == "Reserved", name
            assert dict(info.metadata) == {"user": "root", "verb": verb, "queue": "$sys"}, name


# -- 18: field paths and texts as docs/routing.md says ----------------------


def test_move_errors_name_their_field_and_message(stub: pb_grpc.BoardStub) -> None:
    """Given dead letters, one with no origin header, one whose origin is the
    dead-letter queue itself, and a destination whose scheduled message holds
    a key, I expect: the resubmit-to-itself text to start with its field;
    the missing header's FAILED_PRECONDITION to carry queue and seq; a key
    held by a scheduled message named as scheduled; seqs with a pattern
    blamed on `pattern`."""
    for q in ("dlq", "dst"):
        stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name=q)))
    msgs = [
        Message(tuple=("none",)),
        Message(tuple=("self",), headers={"x-dead-letter-queue": "dlq"}),
        Message(tuple=("keyed",), key="k1"),
    ]
    stub.Post(pb.PostRequest(queue="dlq", messages=codec.messages_to_pb(msgs)))
    later = Message(tuple=("later",), key="k1", not_before=(_FUTURE + 600) * 1_000_000)
    stub.Post(pb.PostRequest(queue="dst", messages=codec.messages_to_pb([later])))

    def move(**kw: Any) -> Callable[[], Any]:
        return lambda: stub.MoveMessages(pb.MoveMessagesRequest(source="dlq", **kw))

    text, meta, _ = _refused(move(seqs=[1]), grpc.StatusCode.FAILED_PRECONDITION)
    assert "no x-dead-letter-queue header" in text
    assert meta == {"queue": "dlq", "seq": "1"}
    text, _, violations = _refused(move(seqs=[2]), grpc.StatusCode.INVALID_ARGUMENT)
    assert text.startswith("destination: message 2 of queue 'dlq'")
    assert [f for f, _ in violations] == ["destination"]
    text, meta, _ = _refused(move(destination="dst", seqs=[3]), grpc.StatusCode.FAILED_PRECONDITION)
    assert "held by message 1 scheduled on queue 'dst'" in text
    assert meta == {"queue": "dlq", "seq": "3"}
    pattern = pb.Pattern(
        templates=[pb.Template(fields=[pb.FieldPattern(formal=pb.VALUE_TYPE_STRING)])]
    )
    _, _, violations = _refused(
        move(destination="dst", seqs=[3], pattern=pattern), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert [f for f, _ in violations] == ["pattern"]


# -- 16: invalid Timestamps and Durations, refused everywhere -----------------

_FUTURE = int(time.time()) + 3600


def _post_with(field: str, ts: Timestamp) -> Call:
    m = pb.Message(tuple=[pb.FieldValue(string="x")])
    getattr(m, field).CopyFrom(ts)
    return lambda s: s.Post(pb.PostRequest(queue="jobs", messages=[m]))


def _queue_with(d: Duration) -> Call:
    spec = pb.QueueSpec(name="windowed", dedup_window=d)
    return lambda s: s.CreateQueue(pb.CreateQueueRequest(spec=spec))


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (_post_with("not_before", Timestamp(seconds=_FUTURE, nanos=10**9)), "not_before"),
        (_post_with("not_before", Timestamp(seconds=_FUTURE, nanos=-1)), "not_before"),
        (_post_with("expires_at", Timestamp(seconds=_FUTURE, nanos=10**9)), "expires_at"),
        (_post_with("expires_at", Timestamp(seconds=_FUTURE, nanos=-5)), "expires_at"),
        (_queue_with(Duration(seconds=60, nanos=10**9)), "spec.dedup_window"),
        (_queue_with(Duration(seconds=60, nanos=-1)), "spec.dedup_window"),
        (_queue_with(Duration(seconds=-1, nanos=5)), "spec.dedup_window"),
        (_queue_with(Duration(nanos=999)), "spec.dedup_window"),
        (
            lambda s: s.Take(
                pb.TakeRequest(queue="jobs", timeout=Duration(seconds=1, nanos=10**9))
            ),
            "timeout",
        ),
        (
            lambda s: s.Take(pb.TakeRequest(queue="jobs", timeout=Duration(seconds=1, nanos=-1))),
            "timeout",
        ),
    ],
)
def test_invalid_times_are_refused_naming_the_field(
    stub: pb_grpc.BoardStub, call: Call, field: str
) -> None:
    """Given a Timestamp or Duration protobuf calls invalid (nanos of 1e9,
    negative nanos, mixed signs) or a dedup window under 1 µs, I expect
    INVALID_ARGUMENT naming the field, and nothing stored or created."""
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="jobs")))
    _, _, violations = _refused(lambda: call(stub), grpc.StatusCode.INVALID_ARGUMENT)
    [(path, _)] = violations
    assert path.endswith(field), path
    assert _waiting(stub, "jobs") == 0
    names = [q.spec.name for q in stub.ListQueues(pb.ListQueuesRequest()).queues]
    assert "windowed" not in names


def test_valid_times_still_pass(stub: pb_grpc.BoardStub) -> None:
    """A window of exactly 1 µs, one of 0 and a Timestamp at its last
    nanosecond are valid, and kept."""
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="jobs")))
    stub.CreateQueue(
        pb.CreateQueueRequest(spec=pb.QueueSpec(name="w", dedup_window=Duration(nanos=1000)))
    )
    assert stub.GetQueue(pb.GetQueueRequest(name="w")).spec.dedup_window.nanos == 1000
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="z", dedup_window=Duration())))
    _post_with("expires_at", Timestamp(seconds=_FUTURE, nanos=999_999_999))(stub)
    assert _waiting(stub, "jobs") == 1
