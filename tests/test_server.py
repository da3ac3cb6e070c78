"""Every RPC over real gRPC: the Python client against a real server on a
loopback port over a real LMDB directory."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from google.protobuf.empty_pb2 import Empty
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from msgboard import Message, Section
from msgboard.client import ANY, Client, Range, Start
from msgboard.errors import (
    InvalidArgument,
    MessageTooLarge,
    QueueExists,
    QueueFull,
    QueueNotFound,
    Unavailable,
)
from msgboard.spec import UNLIMITED
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc


def test_queue_rpcs_create_get_list_delete(client: Client) -> None:
    """Given a fresh board, when I create, get, list and delete queues, I
    expect each answer to reflect the board."""
    v = client.create_queue("jobs", max_unprocessed=10, max_history=UNLIMITED)
    assert v.spec.name == "jobs" and v.next_seq == 1 and v.created_at > 0
    client.create_queue("jobs", max_unprocessed=10, max_history=UNLIMITED)  # idempotent
    client.create_queue("temp", transient=True)
    assert [q.spec.name for q in client.list_queues()] == ["jobs", "temp"]
    assert client.get_queue("temp").spec.transient
    client.delete_queue("temp")
    with pytest.raises(QueueNotFound):
        client.get_queue("temp")
    with pytest.raises(QueueExists):
        client.create_queue("jobs", max_unprocessed=11)


def test_post_take_read_with_natural_templates(client: Client) -> None:
    client.create_queue("work")
    client.post("work", ("job", 7, "resize", 3), body=b"img", headers={"k": "v"}, priority=4)
    client.post("work", ("job", 8, "crop", 30))
    client.post("work", ("note", "hi"), address="rec.pets.cats")
    [r] = client.read("work", ("job", int, ANY, Range(1, 10)))
    assert r.tuple == ("job", 7, "resize", 3) and r.headers == {"k": "v"} and r.priority == 4
    assert r.section is Section.UNPROCESSED
    got = client.take("work", [("note", str), ("job", 8, ANY, ANY)], max=5)
    assert [m.seq for m in got] == [2, 3]
    assert client.read("work", address="topic:rec.#") == []
    [left] = client.take("work", max=5)
    assert left.body == b"img" and left.section is Section.HISTORY


def test_values_of_every_type_round_trip(client: Client) -> None:
    client.create_queue("types")
    t = (None, True, -(2**63), 2**63 - 1, 1.5, float("inf"), "ünï", b"\x00\xff")
    client.post("types", t)
    [m] = client.take("types", (None, bool, int, int, float, float, str, bytes))
    assert m.tuple == t and type(m.tuple[1]) is bool


def test_a_blocking_take_over_grpc_is_woken_by_a_post(client: Client, server: ServerThread) -> None:
    client.create_queue("wake")
    got: list[Message] = []
    th = threading.Thread(target=lambda: got.extend(client.take("wake", ("go",), timeout=20)))
    th.start()
    time.sleep(0.2)
    with Client(server.address) as other:
        other.post("wake", ("go",))
    th.join(10)
    assert [m.tuple for m in got] == [("go",)]


def test_a_client_deadline_during_a_blocked_take_loses_nothing(
    client: Client, server: ServerThread
) -> None:
    """Given a take whose gRPC deadline passes while it waits, when a message
    is posted afterwards, I expect it still on the queue."""
    client.create_queue("dl")
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    req = pb.TakeRequest(queue="dl")
    req.timeout.FromSeconds(30)
    with pytest.raises(grpc.RpcError) as e:
        stub.Take(req, timeout=0.3)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(0.2)
    client.post("dl", ("x",))
    assert client.get_queue("dl").unprocessed == 1


def test_post_stream_answers_every_batch_with_durable_seqs(client: Client) -> None:
    client.create_queue("stream")
    seqs = client.post_many("stream", ((i,) for i in range(2500)), batch=100)
    assert seqs == list(range(1, 2501))
    assert client.get_queue("stream").unprocessed == 2500


def test_post_stream_reports_a_failed_batch_and_carries_on(
    client: Client, server: ServerThread
) -> None:
    client.create_queue("ps")
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    reqs = [
        pb.PostStreamRequest(batch_id=1, queue="ps", messages=[pb.Message(address="a")]),
        pb.PostStreamRequest(batch_id=2, queue="missing", messages=[pb.Message()]),
        pb.PostStreamRequest(batch_id=3, queue="ps", messages=[pb.Message(), pb.Message()]),
    ]
    answers = list(stub.PostStream(iter(reqs)))
    assert [a.batch_id for a in answers] == [1, 2, 3]
    assert list(answers[0].seqs) == [1] and list(answers[2].seqs) == [2, 3]
    assert answers[1].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert "missing" in answers[1].error.message
    with pytest.raises(QueueNotFound):
        client.post_many("missing", [(1,)])


def test_publisher_answers_each_post_once_durable_and_survives_a_bad_one(
    client: Client, server: ServerThread
) -> None:
    """Given an open publisher, when I post one message at a time, one to a
    missing queue and one with a bad header among them, I expect every good
    post answered with the next seq, each bad one raised as its own error
    without ending the stream, and a closed publisher to refuse."""
    client.create_queue("pub")
    with client.publisher() as pub:
        assert pub.post("pub", ("a", 1), body=b"x") == 1
        with pytest.raises(QueueNotFound):
            pub.post("missing", body=b"y")
        assert pub.post_messages("pub", [Message(body=b"2"), Message(body=b"3")]) == [2, 3]
        with pytest.raises(InvalidArgument, match="headers"):
            pub.post("pub", headers={"": "empty name"})
        assert pub.post("pub", address="z") == 4
    with pytest.raises(Unavailable):
        pub.post("pub")
    assert [m.body for m in client.take("pub", max=10)] == [b"x", b"2", b"3", b""]


def test_browse_and_stats(client: Client) -> None:
    client.create_queue("br", max_history=UNLIMITED)
    for i in range(5):
        client.post("br", (i,))
    client.take("br", max=2)
    page = client.browse("br", limit=3)
    assert [m.seq for m in page.messages] == [1, 2, 3] and page.next_seq == 4
    rest = client.browse("br", Start.SEQ, seq=page.next_seq)
    assert [m.seq for m in rest.messages] == [4, 5] and rest.next_seq == 0
    back = client.browse("br", Start.LATEST, reverse=True, section="history")
    assert [m.seq for m in back.messages] == [2, 1]
    s = client.stats()
    assert s.store.sync == "fsync" and s.store.map_size > 0 and s.commits > 0
    [row] = [q for q in s.queues if q.name == "br"]
    assert (row.unprocessed, row.history, row.posted, row.taken) == (3, 2, 5, 2)


def test_bad_input_gets_the_right_status_and_the_board_carries_on(
    client: Client, server: ServerThread
) -> None:
    client.create_queue("ok", max_unprocessed=1)
    with pytest.raises(InvalidArgument, match="queue name"):
        client.create_queue("bad name")
    with pytest.raises(InvalidArgument, match=r"tuple\[0\]"):
        client.post("ok", ([1, 2],))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="max"):
        client.take("ok", max=-5)
    with pytest.raises(QueueNotFound, match="nope"):
        client.post("nope", (1,))
    with pytest.raises(MessageTooLarge):
        client.post("ok", body=b"x" * (4 * 1024 * 1024 + 10))
    client.post("ok", (1,))
    with pytest.raises(QueueFull):
        client.post("ok", (2,))
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    bad_templates = [
        pb.Template(fields=[pb.FieldPattern()]),  # no kind
        pb.Template(fields=[pb.FieldPattern(actual=pb.FieldValue())]),  # value without kind
        pb.Template(fields=[pb.FieldPattern(formal=pb.VALUE_TYPE_UNSPECIFIED)]),
        pb.Template(
            fields=[
                pb.FieldPattern(range=pb.Range(lo=pb.FieldValue(int=5), hi=pb.FieldValue(int=1)))
            ]
        ),
        pb.Template(fields=[pb.FieldPattern(any=Empty())] * 65),
    ]
    for t in bad_templates:
        with pytest.raises(grpc.RpcError) as e:
            stub.Take(pb.TakeRequest(queue="ok", pattern=pb.Pattern(templates=[t])))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, t
        assert "pattern.templates[0]" in (e.value.details() or "")
    with pytest.raises(grpc.RpcError) as e:
        stub.Read(pb.ReadRequest(queue="ok", pattern=pb.Pattern(filter="a = 'x' AND")))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pattern.filter: expected a value, found the end at column 12" in (
        e.value.details() or ""
    )
    with pytest.raises(grpc.RpcError) as e:
        stub.Post(pb.PostRequest(queue="ok", messages=[pb.Message(tuple=[pb.FieldValue()])]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        stub.Browse(pb.BrowseRequest(queue="ok", limit=-1))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # Nothing changed, and the board still serves.
    assert client.get_queue("ok").unprocessed == 1
    assert [q.spec.name for q in client.list_queues()] == ["ok"]


def test_health_and_reflection_serve_stock_tools(server: ServerThread) -> None:
    channel = grpc.insecure_channel(server.address)
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "msgboard.v1.Board"):
        r = health.Check(health_pb2.HealthCheckRequest(service=service))
        assert r.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    [answer] = refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    names = {s.name for s in answer.list_services_response.service}
    assert "msgboard.v1.Board" in names


def test_an_unreachable_server_is_unavailable() -> None:
    from msgboard.errors import Unavailable

    with Client("127.0.0.1:1", timeout=2) as c, pytest.raises(Unavailable):
        c.list_queues()
