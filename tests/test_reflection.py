"""Server reflection, v1 and v1alpha, serving the proto's comments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection_pb2 as rpb
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from msgboard.testing import ServerThread


@pytest.fixture
def channel(server: ServerThread) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


def _v1(
    channel: grpc.Channel, *requests: rpb.ServerReflectionRequest
) -> list[rpb.ServerReflectionResponse]:
    """Answers of grpc.reflection.v1 (its messages are v1alpha's on the wire)."""
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=rpb.ServerReflectionRequest.SerializeToString,
        response_deserializer=rpb.ServerReflectionResponse.FromString,
    )
    return list(call(iter(requests)))


def _comment(f: descriptor_pb2.FileDescriptorProto, path: list[int]) -> str:
    [loc] = [loc for loc in f.source_code_info.location if list(loc.path) == path]
    return loc.leading_comments


def test_v1_lists_the_services(channel: grpc.Channel) -> None:
    """Given a v1 list_services, I expect the board, health and both
    reflection services."""
    [r] = _v1(channel, rpb.ServerReflectionRequest(list_services=""))
    assert {s.name for s in r.list_services_response.service} == {
        "msgboard.v1.Board",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    }


def test_v1_describes_the_board_with_its_comments(channel: grpc.Channel) -> None:
    """Given v1 file_containing_symbol msgboard.v1.Board, I expect board.proto
    and its imports, with the comments of the service, a method and a field."""
    [r] = _v1(channel, rpb.ServerReflectionRequest(file_containing_symbol="msgboard.v1.Board"))
    files = {
        f.name: f
        for f in map(
            descriptor_pb2.FileDescriptorProto.FromString,
            r.file_descriptor_response.file_descriptor_proto,
        )
    }
    assert {"msgboard/v1/board.proto", "google/protobuf/timestamp.proto"} <= set(files)
    board = files["msgboard/v1/board.proto"]
    assert _comment(board, [6, 0]) == " The board service.\n"  # service 0
    [post] = [i for i, m in enumerate(board.service[0].method) if m.name == "Post"]
    assert "one transaction" in _comment(board, [6, 0, 2, post])
    [spec] = [i for i, m in enumerate(board.message_type) if m.name == "QueueSpec"]
    [field] = [
        i for i, f in enumerate(board.message_type[spec].field) if f.name == "unlimited_history"
    ]
    assert "Keep every taken message" in _comment(board, [4, spec, 2, field])
    # What a client would use it for: a pool that knows the service.
    pool = descriptor_pool.DescriptorPool()
    for name in (
        "google/protobuf/any.proto",
        "google/protobuf/duration.proto",
        "google/protobuf/empty.proto",
        "google/protobuf/struct.proto",
        "google/protobuf/timestamp.proto",
        "msgboard/v1/board.proto",
    ):
        pool.Add(files[name])
    assert pool.FindMethodByName("msgboard.v1.Board.Take").output_type.name == "TakeResponse"


def test_v1_answers_not_found_for_an_unknown_symbol(channel: grpc.Channel) -> None:
    """Given an unknown symbol, I expect a NOT_FOUND error response and the
    stream still answering."""
    missing, listed = _v1(
        channel,
        rpb.ServerReflectionRequest(file_containing_symbol="no.such.Thing"),
        rpb.ServerReflectionRequest(list_services=""),
    )
    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
    assert len(listed.list_services_response.service) == 4


def test_v1alpha_still_serves_a_descriptor_database(channel: grpc.Channel) -> None:
    """Given grpcio-reflection's own v1alpha client, I expect it to resolve
    the board's methods."""
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    assert pool.FindServiceByName("msgboard.v1.Board").methods_by_name["Subscribe"]
    assert pool.FindMessageTypeByName("msgboard.v1.FieldValue").fields_by_name["null"]


def _v1alpha(
    channel: grpc.Channel, *requests: rpb.ServerReflectionRequest
) -> list[rpb.ServerReflectionResponse]:
    call = channel.stream_stream(
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        request_serializer=rpb.ServerReflectionRequest.SerializeToString,
        response_deserializer=rpb.ServerReflectionResponse.FromString,
    )
    return list(call(iter(requests)))


def _file_names(r: rpb.ServerReflectionResponse) -> list[str]:
    assert r.WhichOneof("message_response") == "file_descriptor_response", r.error_response
    return [
        descriptor_pb2.FileDescriptorProto.FromString(b).name
        for b in r.file_descriptor_response.file_descriptor_proto
    ]


@pytest.mark.parametrize("version", [_v1, _v1alpha], ids=["v1", "v1alpha"])
def test_a_method_symbol_resolves_to_its_file(channel: grpc.Channel, version: Any) -> None:
    """Given file_containing_symbol of a method (as grpcurl's ``describe
    msgboard.v1.Board.Post`` asks), expect board.proto; an unknown method of
    a known service is NOT_FOUND."""
    found, missing = version(
        channel,
        rpb.ServerReflectionRequest(file_containing_symbol="msgboard.v1.Board.KickConsumer"),
        rpb.ServerReflectionRequest(file_containing_symbol="msgboard.v1.Board.NoSuchMethod"),
    )
    assert _file_names(found)[0] == "msgboard/v1/board.proto"
    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
    assert "msgboard.v1.Board.NoSuchMethod" in missing.error_response.error_message


@pytest.mark.parametrize("version", [_v1, _v1alpha], ids=["v1", "v1alpha"])
def test_the_error_details_files_are_served(channel: grpc.Channel, version: Any) -> None:
    """Given the google.rpc types every error carries, expect their files
    (with their imports), so a reflection client can decode the details."""
    info, status, by_name = version(
        channel,
        rpb.ServerReflectionRequest(file_containing_symbol="google.rpc.ErrorInfo"),
        rpb.ServerReflectionRequest(file_containing_symbol="google.rpc.Status"),
        rpb.ServerReflectionRequest(file_by_filename="google/rpc/error_details.proto"),
    )
    assert _file_names(info)[0] == "google/rpc/error_details.proto"
    assert "google/protobuf/duration.proto" in _file_names(info)
    assert _file_names(status) == ["google/rpc/status.proto", "google/protobuf/any.proto"]
    assert _file_names(by_name)[0] == "google/rpc/error_details.proto"
