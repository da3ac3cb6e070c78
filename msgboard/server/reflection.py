"""gRPC server reflection, v1 and v1alpha, serving the proto's comments.

grpcio-reflection serves v1alpha alone, and its descriptors are rebuilt from
the loaded modules, which keep no comments. This servicer answers both
``grpc.reflection.v1.ServerReflection`` and
``grpc.reflection.v1alpha.ServerReflection`` (their messages are the same on
the wire) from the descriptor set ``scripts/gen-proto`` writes with the
proto's source info (``msgboard/v1/board.binpb``), so a ``describe`` shows the
documentation of every service, method, message and field. The health and
reflection services' own files come from their modules, without comments, and
so do ``google/rpc/status.proto`` and ``google/rpc/error_details.proto``: every
failed call carries their messages (msgboard/details.py), and a client that
knows only reflection (grpcurl) decodes them from these. A method's full name
(``msgboard.v1.Board.Post``) resolves to its service's file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from importlib import resources
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2 as rpb

#: The two versions of the service, both served.
SERVICES = ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection")


def _files() -> list[descriptor_pb2.FileDescriptorProto]:
    """Every file served: board.proto and its imports with their comments,
    google.rpc's status and error details, the health proto, and the
    reflection protos (v1 made from v1alpha's, which differs only in its
    package; it stays last)."""
    data = resources.files("msgboard.v1").joinpath("board.binpb").read_bytes()
    files = list(descriptor_pb2.FileDescriptorSet.FromString(data).file)
    for module in (status_pb2, error_details_pb2, health_pb2, rpb):
        files.append(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb))
    v1 = descriptor_pb2.FileDescriptorProto()
    v1.CopyFrom(files[-1])
    v1.name = "grpc/reflection/v1/reflection.proto"
    v1.package = "grpc.reflection.v1"
    for message in v1.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(".v1alpha.", ".v1.")
    for method in v1.service[0].method:
        method.input_type = method.input_type.replace(".v1alpha.", ".v1.")
        method.output_type = method.output_type.replace(".v1alpha.", ".v1.")
    files.append(v1)
    return files


class Reflection:
    """Answers reflection requests from the files of ``_files()``."""

    def __init__(self, service_names: Iterable[str]) -> None:
        self._names = sorted({*service_names, *SERVICES})
        self._pool = descriptor_pool.DescriptorPool()
        self._bytes: dict[str, bytes] = {}
        seen: set[str] = set()
        for f in _files():
            if f.name in seen:  # a well-known type imported by two files
                continue
            seen.add(f.name)
            self._pool.Add(f)
            self._bytes[f.name] = f.SerializeToString()

    def _file_with_deps(self, name: str) -> list[bytes]:
        """The file named ``name`` and every file it imports, itself first."""
        out, todo, seen = [], [name], set()
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            out.append(self._bytes[n])
            todo += [d.name for d in self._pool.FindFileByName(n).dependencies]
        return out

    def _file_containing(self, symbol: str) -> Any:
        """The file declaring ``symbol``: a service, message, enum, field or
        value, as the pool finds them, or a method ``Service.Method``, which
        it does not. KeyError when there is none."""
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            service, _, method = symbol.rpartition(".")
            try:
                found = self._pool.FindServiceByName(service)
            except KeyError:
                found = None
            if found is None or method not in found.methods_by_name:
                raise KeyError(symbol) from None
            return found.file

    def answer(self, request: rpb.ServerReflectionRequest) -> rpb.ServerReflectionResponse:
        r = rpb.ServerReflectionResponse(original_request=request)
        kind = request.WhichOneof("message_request")
        try:
            if kind == "list_services":
                r.list_services_response.service.extend(
                    rpb.ServiceResponse(name=n) for n in self._names
                )
            elif kind == "file_by_filename":
                files = self._file_with_deps(request.file_by_filename)
                r.file_descriptor_response.file_descriptor_proto.extend(files)
            elif kind == "file_containing_symbol":
                f = self._file_containing(request.file_containing_symbol)
                r.file_descriptor_response.file_descriptor_proto.extend(
                    self._file_with_deps(f.name)
                )
            elif kind == "all_extension_numbers_of_type":
                name = request.all_extension_numbers_of_type
                self._pool.FindMessageTypeByName(name)  # KeyError: not found
                r.all_extension_numbers_response.base_type_name = name  # ours have none
            elif kind == "file_containing_extension":
                raise KeyError(request.file_containing_extension.containing_type)
            else:
                r.error_response.error_code = grpc.StatusCode.INVALID_ARGUMENT.value[0]
                r.error_response.error_message = "no request set"
        except KeyError as e:
            r.ClearField("message_response")
            r.error_response.error_code = grpc.StatusCode.NOT_FOUND.value[0]
            r.error_response.error_message = f"{kind}: {e.args[0]} not found"
        return r

    async def _stream(
        self, requests: AsyncIterator[rpb.ServerReflectionRequest], context: Any
    ) -> AsyncIterator[rpb.ServerReflectionResponse]:
        async for request in requests:
            yield self.answer(request)

    def handlers(self) -> list[grpc.GenericRpcHandler[Any, Any]]:
        """One handler per version of the service."""
        method = grpc.stream_stream_rpc_method_handler(
            self._stream,
            request_deserializer=rpb.ServerReflectionRequest.FromString,
            response_serializer=rpb.ServerReflectionResponse.SerializeToString,
        )
        return [
            grpc.method_handlers_generic_handler(s, {"ServerReflectionInfo": method})
            for s in SERVICES
        ]
