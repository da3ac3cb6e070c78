"""The JSON examples of docs/clients.md are true: sent in document order to a
real board, each request is answered as the page says.

A ```json block tagged ``request:Method`` is parsed with ``json_format``
against the method's request type (unknown fields refused) and sent; the
next block tagged ``response:Method`` must match the answer, in the JSON
mapping, as conformance cases match (tests/test_conformance.py: keys shown
must be equal, keys left out are not checked; the null value is written
``"NULL_VALUE"``, as grpcurl prints it). A string ``"${name}"`` in a
response captures that part of the answer for later requests. A request
that fails must be followed by a ```text block quoting the error's message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from tests.test_conformance import Failure, match

PAGE = Path(__file__).resolve().parent.parent / "docs" / "clients.md"
BLOCK = re.compile(r"^```(\w+)[ \t]*(\S*)\n(.*?)^```$", re.M | re.S)
VAR = re.compile(r"\$\{(\w+)\}")
SERVICE = pb.DESCRIPTOR.services_by_name["Board"]


def examples() -> list[tuple[str, str, str]]:
    """(language, tag, text) of every fenced block of the page."""
    return [(m[1], m[2], m[3]) for m in BLOCK.finditer(PAGE.read_text())]


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[Any]:
    server = ServerThread(tmp_path / "board").start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            yield pb_grpc.BoardStub(channel)
    finally:
        server.stop()


def test_every_json_block_is_a_tagged_example() -> None:
    tags = [tag for lang, tag, _ in examples() if lang == "json"]
    assert tags, "docs/clients.md has no JSON examples"
    for tag in tags:
        kind, _, method = tag.partition(":")
        assert kind in ("request", "response") and method in SERVICE.methods_by_name, tag


def test_the_json_examples_run_as_shown(stub: Any) -> None:
    variables: dict[str, Any] = {}
    blocks = examples()
    answer: dict[str, Any] | None = None
    for i, (lang, tag, text) in enumerate(blocks):
        if lang != "json":
            continue
        kind, _, name = tag.partition(":")
        method = SERVICE.methods_by_name[name]
        body = json.loads(text)
        if kind == "request":
            request = getattr(pb, method.input_type.name)()
            json_format.ParseDict(_fill(body, variables), request)
            try:
                answer = as_grpcurl(
                    json_format.MessageToDict(getattr(stub, name)(request, timeout=30))
                )
            except grpc.RpcError as e:
                quoted = blocks[i + 1] if i + 1 < len(blocks) else ("", "", "")
                assert quoted[0] == "text" and f"Message: {e.details()}" in quoted[2], (
                    f"{name} failed ({e.details()}) and the page does not say so"
                )
                for field in Failure(e).fields:
                    assert f'"field":"{field}"' in quoted[2], f"the page lacks {field}"
                answer = None
        else:
            assert answer is not None, f"response:{name} follows no answered request"
            _capture(body, answer, variables)
            match(_fill(body, variables), answer)


def as_grpcurl(value: Any) -> Any:
    """``json_format``'s answer as grpcurl prints it: the null value
    (``google.protobuf.NullValue``) by its name, ``"NULL_VALUE"``, not ``null``."""
    if isinstance(value, dict):
        return {
            k: "NULL_VALUE" if k == "null" and v is None else as_grpcurl(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [as_grpcurl(v) for v in value]
    return value


def _fill(value: Any, variables: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, variables) for v in value]
    if isinstance(value, str) and (m := VAR.fullmatch(value)):
        return variables[m[1]]
    return value


def _capture(shown: Any, answer: Any, variables: dict[str, Any]) -> None:
    """Saves the parts of ``answer`` that ``shown`` writes as ``"${name}"``."""
    if isinstance(shown, dict) and isinstance(answer, dict):
        for k, v in shown.items():
            _capture(v, answer.get(k), variables)
    elif isinstance(shown, list) and isinstance(answer, list):
        for s, a in zip(shown, answer, strict=False):
            _capture(s, a, variables)
    elif isinstance(shown, str) and (m := VAR.fullmatch(shown)) and m[1] not in variables:
        variables[m[1]] = answer
