"""Errors machines can read: every failed call carries a google.rpc.Status in
``grpc-status-details-bin`` (ErrorInfo, and BadRequest for INVALID_ARGUMENT);
in-stream errors carry the same details; the Python client raises the class
and attributes they name."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc
import pytest
from google.protobuf.any_pb2 import Any as AnyPb
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2

from msgboard.client import Client
from msgboard.client.wire import _rebuilt
from msgboard.errors import InvalidArgument, QueueExists, QueueFull, QueueNotFound
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from tests.test_subscribe import Requests


def _status(call: Callable[[], Any]) -> tuple[grpc.RpcError, status_pb2.Status]:
    """The failure of ``call`` and the google.rpc.Status of its trailer."""
    with pytest.raises(grpc.RpcError) as e:
        call()
    err: Any = e.value
    [raw] = [v for k, v in err.trailing_metadata() if k == "grpc-status-details-bin"]
    st = status_pb2.Status.FromString(raw)
    assert (st.code, st.message) == (err.code().value[0], err.details())
    return err, st


def _unpacked(
    details: Iterable[AnyPb],
) -> tuple[error_details_pb2.ErrorInfo, list[tuple[str, str]]]:
    """The ErrorInfo of ``details`` and the (field, description) pairs of its
    BadRequest, if any."""
    info, violations = None, []
    for d in details:
        i, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
        if d.Unpack(i):
            info = i
        elif d.Unpack(bad):
            violations += [(v.field, v.description) for v in bad.field_violations]
    assert info is not None and info.domain == "msgboard"
    return info, violations


def test_an_invalid_argument_carries_a_bad_request_with_the_field_path(
    server: ServerThread,
) -> None:
    """Given a Post whose third message has a tuple field with no kind, I
    expect INVALID_ARGUMENT with ErrorInfo InvalidArgument and a BadRequest
    naming messages[2].tuple[0]; and the board carries on."""
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="q")))
    good = pb.Message(tuple=[pb.FieldValue(int=1)])
    bad = pb.Message(tuple=[pb.FieldValue()])
    err, st = _status(lambda: stub.Post(pb.PostRequest(queue="q", messages=[good, good, bad])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    info, violations = _unpacked(st.details)
    assert info.reason == "InvalidArgument"
    assert info.metadata["field"] == "messages[2].tuple[0]"
    assert violations == [("messages[2].tuple[0]", "no kind set")]
    assert list(stub.Post(pb.PostRequest(queue="q", messages=[good])).seqs) == [1]


def test_a_not_found_names_its_class_and_queue(server: ServerThread) -> None:
    """Given GetQueue of a missing queue, I expect ErrorInfo QueueNotFound
    with metadata queue, and no BadRequest."""
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    err, st = _status(lambda: stub.GetQueue(pb.GetQueueRequest(name="nope")))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    info, violations = _unpacked(st.details)
    assert (info.reason, dict(info.metadata), violations) == (
        "QueueNotFound",
        {"queue": "nope"},
        [],
    )


def test_stream_errors_carry_the_same_details(server: ServerThread) -> None:
    """Given a PostStream batch with a bad message, a Subscribe with negative
    credit, and a Subscribe whose first request is not `open`, I expect the
    in-stream Errors and the failed call to carry ErrorInfo and BadRequest."""
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="q")))
    batch = pb.PostStreamRequest(
        batch_id=7, queue="q", messages=[pb.Message(tuple=[pb.FieldValue()])]
    )
    [answer] = stub.PostStream(iter([batch]))
    info, violations = _unpacked(answer.error.details)
    assert (info.reason, answer.error.name) == ("InvalidArgument", "InvalidArgument")
    assert violations == [("messages[0].tuple[0]", "no kind set")]

    reqs = Requests([pb.SubscribeRequest(open=pb.Subscription(queue="q"))])
    call = stub.Subscribe(reqs)
    assert next(call).WhichOneof("kind") == "subscribed"
    reqs.put(pb.SubscribeRequest(credit=-1, ref=4))
    r = next(call)
    reqs.put(None)
    list(call)
    assert (r.WhichOneof("kind"), r.ref) == ("error", 4)
    info, violations = _unpacked(r.error.details)
    assert info.reason == "InvalidArgument" and violations[0][0] == "credit"

    err, st = _status(lambda: list(stub.Subscribe(iter([pb.SubscribeRequest(credit=1)]))))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _unpacked(st.details)[1][0][0] == "open"


def test_the_python_client_raises_the_class_and_facts_the_details_name(
    server: ServerThread,
) -> None:
    """Given errors from the board, I expect the client's exceptions to be
    the classes the ErrorInfo names, with its facts as attributes."""
    with Client(server.address) as c:
        with pytest.raises(QueueNotFound) as nf:
            c.get_queue("nope")
        assert nf.value.name == "nope"
        c.create_queue("q")
        with pytest.raises(InvalidArgument) as bad:
            c.take("q", filter="a = ")
        assert bad.value.field.startswith("pattern.filter")


def test_a_status_without_msgboard_details_gets_the_class_of_its_code() -> None:
    """Given details from another domain, I expect the class of the status
    code, not a class the foreign reason happens to name."""
    foreign = AnyPb()
    foreign.Pack(error_details_pb2.ErrorInfo(reason="QueueNotFound", domain="example.com"))
    e = _rebuilt("NOT_FOUND", "gone", [foreign])
    assert type(e).__name__ == "NotFound" and str(e) == "gone"


def test_bad_lease_and_delivery_ids_name_their_place_in_the_request(
    server: ServerThread,
) -> None:
    """Given an Ack of a lease never given and of a lease of another queue, a
    Subscribe nack of an unknown id and an ack of one, I expect each
    INVALID_ARGUMENT to carry a BadRequest naming the id's place in the
    request: lease_ids[i], nack.ids[i], ack.ids[i]. A rejected lease is
    answered in AckResponse.rejected (the call succeeds, the good lease is
    applied); an already-acked one is NOT_FOUND with its place as ErrorInfo's
    field."""
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    one = pb.Message(tuple=[pb.FieldValue(int=1)])
    for name in ("q", "other"):
        stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name=name)))
        stub.Post(pb.PostRequest(queue=name, messages=[one]))
    lease = Duration(seconds=60)
    [mine] = stub.Take(pb.TakeRequest(queue="q", lease=lease)).lease_ids
    [theirs] = stub.Take(pb.TakeRequest(queue="other", lease=lease)).lease_ids

    for ids, field, text in (
        ([theirs, theirs + 1000], "lease_ids[1]", f"lease {theirs + 1000} was never given"),
        ([theirs], "lease_ids[0]", f"lease {theirs} is on queue 'other', not 'q'"),
    ):
        r = stub.Ack(pb.AckRequest(queue="q", lease_ids=ids))
        bad = r.rejected[-1]
        assert bad.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        info, violations = _unpacked(bad.error.details)
        assert (info.reason, dict(info.metadata)) == ("InvalidArgument", {"field": field})
        assert violations == [(field, text)]
        assert (bad.id, bad.error.message) == (ids[-1], f"{field}: {text}")
    r = stub.Ack(pb.AckRequest(queue="q", lease_ids=[mine, mine + 1000, mine]))
    assert list(r.lease_ids) == [mine]  # applied, beside the bad one
    r = stub.Ack(pb.AckRequest(queue="q", lease_ids=[123456789, mine]))
    [_, gone] = r.rejected
    info, violations = _unpacked(gone.error.details)
    assert gone.error.code == grpc.StatusCode.NOT_FOUND.value[0] and violations == []
    assert (gone.id, dict(info.metadata)) == (mine, {"field": "lease_ids[1]"})
    assert (
        gone.error.message
        == f"lease_ids[1]: lease {mine} was already acked or given back, or ran out"
    )

    stub.Post(pb.PostRequest(queue="q", messages=[one]))
    reqs = Requests([pb.SubscribeRequest(open=pb.Subscription(queue="q"))])
    call = stub.Subscribe(reqs)
    assert next(call).WhichOneof("kind") == "subscribed"
    assert [d.id for d in next(call).deliveries.items] == [1]
    reqs.put(pb.SubscribeRequest(nack=pb.Nacks(ids=[1, 42]), ref=1))
    nacked = next(call)
    reqs.put(pb.SubscribeRequest(ack=pb.Acks(ids=[1, 99]), ref=2))
    acked = next(call)
    reqs.put(None)
    list(call)
    assert (nacked.WhichOneof("kind"), nacked.ref) == ("error", 1)
    info, violations = _unpacked(nacked.error.details)
    assert (info.reason, dict(info.metadata)) == ("InvalidArgument", {"field": "nack.ids[1]"})
    assert violations == [("nack.ids[1]", "delivery 42 was never delivered on this subscription")]
    assert (acked.WhichOneof("kind"), acked.ref, list(acked.acked.ids)) == ("acked", 2, [1])
    [rejected] = acked.acked.rejected
    info, violations = _unpacked(rejected.error.details)
    assert (rejected.id, dict(info.metadata)) == (99, {"field": "ack.ids[1]"})
    assert violations == [("ack.ids[1]", "delivery 99 was never delivered on this subscription")]


def test_a_missing_queue_is_named_bare_and_the_text_says_what_was_tried(
    server: ServerThread,
) -> None:
    """Given a Subscribe to a missing queue, and a CreateSelector whose source
    or destination is missing, I expect NOT_FOUND whose ErrorInfo metadata
    `queue` is the bare name (so QueueNotFound.name is) and whose text says
    what was tried."""
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    err, st = _status(
        lambda: list(
            stub.Subscribe(iter([pb.SubscribeRequest(open=pb.Subscription(queue="nosuch"))]))
        )
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert err.details() == 'cannot subscribe to queue "nosuch": it does not exist'
    info, _ = _unpacked(st.details)
    assert (info.reason, dict(info.metadata)) == ("QueueNotFound", {"queue": "nosuch"})
    with Client(server.address) as c:
        with pytest.raises(QueueNotFound) as nf:
            c.subscribe("nosuch")
        assert nf.value.name == "nosuch"

    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="here")))
    for source, dest, missing, text in (
        ("gone", "here", "gone", 'the selector\'s source queue "gone" does not exist'),
        ("here", "away", "away", 'the selector\'s destination queue "away" does not exist'),
    ):
        spec = pb.SelectorSpec(source=source, destination=dest)
        err, st = _status(
            lambda spec=spec: stub.CreateSelector(pb.CreateSelectorRequest(spec=spec))
        )
        assert (err.code(), err.details()) == (grpc.StatusCode.NOT_FOUND, text)
        assert dict(_unpacked(st.details)[0].metadata) == {"queue": missing}


def test_queue_full_and_queue_exists_name_their_queue(server: ServerThread) -> None:
    """Given a CreateQueue of an existing name with other properties, and a
    Post over a rejecting queue's max_unprocessed, I expect ErrorInfo
    QueueExists and QueueFull with metadata `queue`, and the Python client's
    errors to hold it in `.queue`."""
    stub = pb_grpc.BoardStub(grpc.insecure_channel(server.address))
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="small", max_unprocessed=1)))
    err, st = _status(
        lambda: stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="small")))
    )
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    info, _ = _unpacked(st.details)
    assert (info.reason, dict(info.metadata)) == ("QueueExists", {"queue": "small"})
    one = pb.Message(tuple=[pb.FieldValue(int=1)])
    err, st = _status(lambda: stub.Post(pb.PostRequest(queue="small", messages=[one, one])))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info, _ = _unpacked(st.details)
    assert (info.reason, dict(info.metadata)) == ("QueueFull", {"queue": "small"})

    with Client(server.address) as c:
        with pytest.raises(QueueExists) as exists:
            c.create_queue("small")
        assert exists.value.queue == "small"
        with pytest.raises(QueueFull) as full:
            c.post_many("small", [("a",), ("b",)])
        assert full.value.queue == "small"
