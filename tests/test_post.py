"""Posting over gRPC: what an error about a message says, and what a post
says about each message, through Post, PostStream, the Python client and
the msgboard command, against a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest

from msgboard import Message
from msgboard.cli import main
from msgboard.client import Client, Disposition, Receipt
from msgboard.errors import InvalidArgument, QueueExists
from msgboard.spec import OverflowPolicy, Role
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc


def good(n: int) -> pb.Message:
    return pb.Message(tuple=[pb.FieldValue(int=n)])


def three_with_a_bad_third() -> list[pb.Message]:
    """Two good messages, then one whose first field has no kind set."""
    return [good(0), good(1), pb.Message(tuple=[pb.FieldValue()])]


@pytest.fixture
def stub(server: ServerThread) -> Iterator[pb_grpc.BoardStub]:
    """A raw stub, to send what the Python client would refuse to build."""
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.BoardStub(channel)


def test_an_error_in_the_third_message_of_a_post_names_it(
    client: Client, stub: pb_grpc.BoardStub
) -> None:
    """Given a Post whose third message has a field with no kind, I expect
    INVALID_ARGUMENT naming messages[2].tuple[0], and nothing stored."""
    client.create_queue("q")
    with pytest.raises(grpc.RpcError) as e:
        stub.Post(pb.PostRequest(queue="q", messages=three_with_a_bad_third()))
    assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "messages[2].tuple[0]: no kind set"
    assert client.get_queue("q").unprocessed == 0


def test_an_error_in_a_post_stream_batch_names_the_message(
    client: Client, stub: pb_grpc.BoardStub
) -> None:
    """Given a PostStream whose second batch has a bad third message, I expect
    that batch's error to name messages[2].tuple[0] and the stream to carry
    on with the third batch."""
    client.create_queue("q")
    reqs = [
        pb.PostStreamRequest(batch_id=1, queue="q", messages=[good(0)]),
        pb.PostStreamRequest(batch_id=2, queue="q", messages=three_with_a_bad_third()),
        pb.PostStreamRequest(batch_id=3, queue="q", messages=[good(1)]),
    ]
    answers = list(stub.PostStream(iter(reqs)))
    assert [a.batch_id for a in answers] == [1, 2, 3]
    assert answers[1].error.message == "messages[2].tuple[0]: no kind set"
    assert list(answers[2].seqs) == [2]


def test_the_client_names_the_message_and_keeps_the_path_as_a_field(client: Client) -> None:
    """Given bad third messages, caught by the client before sending or by the
    board's limits, I expect the error to name the message in its text and
    in ``field``, as an embedded board's error does."""
    client.create_queue("q")
    bad_type = [Message(tuple=(1,)), Message(tuple=(2,)), Message(tuple=([3],))]  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"^messages\[2\]\.tuple\[0\]: list ") as e:
        client.post_messages("q", bad_type)
    assert e.value.field == "messages[2].tuple[0]"
    bad_header = [Message(), Message(), Message(headers={"": "v"})]
    with pytest.raises(InvalidArgument, match=r"^messages\[2\]\.headers: ") as e:
        client.post_messages("q", bad_header)  # refused by the server
    assert e.value.field == "messages[2].headers"
    assert client.get_queue("q").unprocessed == 0
    many = [(i,) for i in range(5)] + [([5],)]
    with pytest.raises(InvalidArgument, match=r"^messages\[5\]\.tuple\[0\]: list "):
        client.post_many("q", many, batch=2)  # type: ignore[arg-type]
    assert client.get_queue("q").unprocessed == 4  # the two batches before it


def test_within_prefixes_the_field_and_the_text() -> None:
    e = InvalidArgument("tuple[0]: no kind set")
    assert e.field == "tuple[0]"
    inner = e.within("messages[2]")
    assert str(inner) == "messages[2].tuple[0]: no kind set"
    assert inner.field == "messages[2].tuple[0]"
    assert InvalidArgument("delivery 3 was never delivered").field == ""
    plain = InvalidArgument("no field").within("messages[1]")
    assert (str(plain), plain.field) == ("messages[1]: no field", "messages[1]")


def full_queues(client: Client) -> None:
    client.create_queue("spill")
    client.create_queue("dlq")
    client.create_queue("ov", max_unprocessed=1)
    client.create_selector("ov", to="spill", role=Role.OVERFLOW)
    client.create_queue(
        "dl", max_unprocessed=1, overflow=OverflowPolicy.DEAD_LETTER, dead_letter="dlq"
    )
    client.create_queue("dn", max_unprocessed=1, overflow=OverflowPolicy.DROP_NEW)


def test_post_and_post_stream_say_what_became_of_each_message(client: Client) -> None:
    """Given full queues with an overflow selector, the dead-letter and the
    drop-new policies, I expect each message's receipt to say where it went,
    through a unary Post and through a Publisher's PostStream alike."""
    full_queues(client)
    two = [Message(tuple=(0,)), Message(tuple=(1,))]
    assert client.post_receipts("ov", two) == [
        Receipt(1, Disposition.STORED),
        Receipt(0, Disposition.OVERFLOWED),
    ]
    with client.publisher() as pub:
        assert pub.post_receipts("dl", two) == [
            Receipt(1, Disposition.STORED),
            Receipt(0, Disposition.DEAD_LETTERED),
        ]
        assert pub.post_messages("dn", two) == [1, 0]
    assert client.post_receipts("dn", two[:1]) == [Receipt(0, Disposition.DROPPED)]


def test_the_post_command_prints_what_became_of_the_message(
    server: ServerThread, client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    """Given full queues, I expect `msgboard post` to print the seq of a stored
    message and, for one that was not stored, 0 and where it went."""
    full_queues(client)
    out = []
    for args in (["ov"], ["ov"], ["dl"], ["dl", "--json"], ["dn"], ["dn", "--json"]):
        assert main(["post", *args, "--tuple", "[1]", "--server", server.address]) == 0
        out.append(capsys.readouterr().out.strip())
    assert out[:3] == ["1", '0 overflowed (queue "ov" is full)', "1"]
    assert json.loads(out[3]) == {"queue": "dl", "seq": 0, "disposition": "dead-lettered"}
    assert out[4] == "1"
    assert json.loads(out[5]) == {"queue": "dn", "seq": 0, "disposition": "dropped"}


def test_a_dead_letter_policy_without_a_dead_letter_queue_is_invalid_argument(
    client: Client,
) -> None:
    with pytest.raises(InvalidArgument, match=r"^spec\.overflow: "):
        client.create_queue("q", max_unprocessed=1, overflow=OverflowPolicy.DEAD_LETTER)
    assert client.list_queues() == []


def test_already_exists_names_what_differs(client: Client) -> None:
    client.create_queue("jobs", max_history=1000)
    with pytest.raises(QueueExists) as e:
        client.create_queue("jobs", max_history=500)
    assert str(e.value) == 'queue "jobs" exists with max_history 1000 (asked: 500)'
