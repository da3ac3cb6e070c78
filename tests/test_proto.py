"""The generated gRPC code is the output of scripts/gen-proto, unedited."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from msgboard import codec
from msgboard.client import Client
from msgboard.spec import UNLIMITED
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    """Given the committed msgboard/v1 package, when I regenerate it from
    proto/, I expect the same files, byte for byte."""
    subprocess.run(
        [str(ROOT / "scripts" / "gen-proto"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    generated = sorted(p.name for p in (tmp_path / "msgboard" / "v1").iterdir())
    committed = sorted(
        p.name for p in (ROOT / "msgboard" / "v1").iterdir() if not p.name.startswith("__pycache")
    )
    assert generated == committed
    for name in generated:
        new = (tmp_path / "msgboard" / "v1" / name).read_bytes()
        old = (ROOT / "msgboard" / "v1" / name).read_bytes()
        assert new == old, f"msgboard/v1/{name} is stale: run scripts/gen-proto"


def _protoc(tmp_path: Path, *outs: str) -> None:
    """Runs the system's protoc (Debian's protobuf-compiler: grpc_tools'
    has no Java or C# generator) on the proto, with no flag but the outputs."""
    import shutil

    if shutil.which("protoc") is None:
        pytest.skip("protoc is not installed (Debian: protobuf-compiler)")
    for out in outs:
        if out not in ("java", "csharp") and shutil.which(f"protoc-gen-{out}") is None:
            pytest.skip(f"protoc-gen-{out} is not installed (Debian: protoc-gen-{out})")
        (tmp_path / out).mkdir()
    subprocess.run(
        ["protoc", f"-I{ROOT / 'proto'}"]
        + [f"--{out}_out={tmp_path / out}" for out in outs]
        + [str(ROOT / "proto" / "msgboard" / "v1" / "board.proto")],
        check=True,
    )


def test_java_and_csharp_generate_without_extra_flags(tmp_path: Path) -> None:
    """Given the proto, when I run protoc --java_out and --csharp_out with no
    other flag, I expect one Java file per type in the package the proto
    names, and C# in namespace Msgboard.V1."""
    _protoc(tmp_path, "java", "csharp")
    java = tmp_path / "java" / "io" / "github" / "msgboard" / "v1"
    assert (java / "FieldValue.java").is_file() and (java / "BoardProto.java").is_file()
    cs = (tmp_path / "csharp" / "Board.cs").read_text()
    assert "namespace Msgboard.V1" in cs
    assert " Deliveries_ {" not in cs  # no member named like its type


def test_go_generates_without_extra_flags(tmp_path: Path) -> None:
    """Given the proto and Debian's protoc-gen-go, when I run protoc --go_out
    with no other flag, I expect the package msgboardpb at its import path."""
    _protoc(tmp_path, "go")
    go = tmp_path / "go" / "github.com" / "msgboard" / "msgboard" / "clients" / "go" / "msgboardpb"
    assert "package msgboardpb" in (go / "board.pb.go").read_text()


def test_no_type_is_named_like_a_well_known_type() -> None:
    """Given the proto's messages and enums, I expect none to share a name
    with a google.protobuf well-known type (Value, Any, NullValue, ...)."""
    import importlib

    names = "any api duration empty field_mask source_context struct timestamp type wrappers"
    wkt = set()
    for name in names.split():
        m = importlib.import_module(f"google.protobuf.{name}_pb2")
        wkt |= set(m.DESCRIPTOR.message_types_by_name) | set(m.DESCRIPTOR.enum_types_by_name)
    ours = set(pb.DESCRIPTOR.message_types_by_name) | set(pb.DESCRIPTOR.enum_types_by_name)
    assert "Timestamp" in wkt and "NullValue" in wkt
    assert ours & wkt == set()


def test_json_null_is_a_null_field_value() -> None:
    """Given a message in proto JSON with a null tuple field, I expect the
    null kind set (JSON null, not {"null": "NULL_VALUE"})."""
    from google.protobuf import json_format

    m = json_format.Parse('{"tuple": [{"null": null}, {"int": "7"}]}', pb.Message())
    assert [v.WhichOneof("kind") for v in m.tuple] == ["null", "int"]
    assert json_format.MessageToDict(m)["tuple"][0] == {"null": None}


def _stub(server: ServerThread) -> pb_grpc.BoardStub:
    return pb_grpc.BoardStub(grpc.insecure_channel(server.address))


def _refused(call: Callable[[], object], where: str) -> None:
    """``call`` fails INVALID_ARGUMENT with a message that names ``where``."""
    with pytest.raises(grpc.RpcError) as e:
        call()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(where), e.value.details()


def test_unlimited_history_is_a_field_not_a_number(server: ServerThread) -> None:
    """Given CreateQueue with unlimited_history, I expect the queue to keep
    every taken message and answer unlimited_history (max_history 0); and
    max_history set with it refused."""
    stub = _stub(server)
    q = stub.CreateQueue(
        pb.CreateQueueRequest(spec=pb.QueueSpec(name="log", unlimited_history=True))
    )
    assert q.spec.unlimited_history and q.spec.max_history == 0
    with Client(server.address) as c:
        assert c.get_queue("log").spec.max_history == UNLIMITED
    _refused(
        lambda: stub.CreateQueue(
            pb.CreateQueueRequest(
                spec=pb.QueueSpec(name="x", max_history=5, unlimited_history=True)
            )
        ),
        "spec.max_history",
    )


def test_credit_is_a_terminal_selectors_and_quota_a_forwarding_ones(
    server: ServerThread,
) -> None:
    """Given selectors, I expect credit taken only by a terminal one, quota
    only by one to a queue, and each answered as it was asked."""
    stub = _stub(server)
    for name in ("a", "b"):
        stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name=name)))
    fwd = stub.CreateSelector(
        pb.CreateSelectorRequest(spec=pb.SelectorSpec(source="a", destination="b", quota=2))
    )
    assert (fwd.spec.quota, fwd.spec.credit) == (2, 0)
    term = stub.CreateSelector(pb.CreateSelectorRequest(spec=pb.SelectorSpec(source="a", credit=7)))
    assert (term.spec.quota, term.spec.credit) == (0, 7)
    _refused(
        lambda: stub.CreateSelector(
            pb.CreateSelectorRequest(spec=pb.SelectorSpec(source="a", destination="b", credit=2))
        ),
        "spec.credit",
    )
    _refused(
        lambda: stub.CreateSelector(
            pb.CreateSelectorRequest(spec=pb.SelectorSpec(source="a", quota=2))
        ),
        "spec.quota",
    )


def test_a_stored_forwarding_selector_from_before_quota_keeps_its_budget() -> None:
    """Given a selector to a queue as the board stored it before quota
    (its budget in credit), I expect it read back with that budget."""
    old = pb.SelectorSpec(source="a", destination="b", credit=3)
    spec = codec.selector_spec_from_pb(old, stored=True)
    assert spec.quota() == 3
    assert codec.selector_spec_to_pb(spec).quota == 3


def test_one_position_enum_and_where_each_value_applies(server: ServerThread) -> None:
    """Given Browse and selectors sharing Position, I expect OLDEST to work
    for both, CURRENT refused by Browse and LATEST by a selector."""
    stub = _stub(server)
    stub.CreateQueue(pb.CreateQueueRequest(spec=pb.QueueSpec(name="q", max_history=9)))
    stub.Post(pb.PostRequest(queue="q", messages=[pb.Message(body=b"1"), pb.Message(body=b"2")]))
    stub.Take(pb.TakeRequest(queue="q"))
    page = stub.Browse(pb.BrowseRequest(queue="q", start=pb.POSITION_OLDEST))
    assert [m.body for m in page.messages] == [b"1", b"2"]
    page = stub.Browse(pb.BrowseRequest(queue="q", start=pb.POSITION_SEQ, start_seq=2))
    assert [m.body for m in page.messages] == [b"2"]
    _refused(lambda: stub.Browse(pb.BrowseRequest(queue="q", start=pb.POSITION_CURRENT)), "start")
    copy = stub.CreateSelector(
        pb.CreateSelectorRequest(
            spec=pb.SelectorSpec(source="q", op=pb.OPERATION_COPY, start=pb.POSITION_OLDEST)
        )
    )
    assert copy.spec.start == pb.POSITION_OLDEST
    _refused(
        lambda: stub.CreateSelector(
            pb.CreateSelectorRequest(spec=pb.SelectorSpec(source="q", start=pb.POSITION_LATEST))
        ),
        "spec.start",
    )
