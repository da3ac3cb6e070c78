"""The shared conformance cases (conformance/cases/*.json), run through the
Python client: one test per case, against one real board served on a free
loopback port for the whole module.

The format is conformance/README.md. Requests are parsed with
``json_format.ParseDict`` and sent on the stub of a ``msgboard.client.Client``
(its channel, credentials and metadata); failures are turned into
msgboard's typed errors by the client's own mapping (``msgboard.client.wire``), and
the expected ``code``, ``reason`` and ``field`` are read from that error.
"""

from __future__ import annotations

import json
import math
import queue
import re
import secrets
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message as PbMessage
from google.rpc import error_details_pb2, status_pb2

from msgboard.client import Client
from msgboard.client.wire import rpc_error
from msgboard.details import DETAILS_KEY
from msgboard.errors import InvalidArgument
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "conformance" / "cases"
#: Seconds a call may take beyond the timeout its request carries.
DEADLINE = 30.0
#: The per-run prefix of queue names.
RUN = "c" + secrets.token_hex(3)
VAR = re.compile(r"\$\{(\w+)\}")
QUEUE_VAR = re.compile(r"q\d*")
PATH_PART = re.compile(r"([A-Za-z_]\w*)|\[(\d+)\]")
#: The key of an ``expect`` object listing keys that must be absent.
NOT_SET = "$unset"
ABSENT = object()


@dataclass(frozen=True)
class Case:
    file: str
    index: int
    name: str
    steps: list[dict[str, Any]]

    @property
    def id(self) -> str:
        return f"{self.file}/{self.name}"


def load() -> list[Case]:
    cases: list[Case] = []
    for path in sorted(CASES.glob("*.json")):
        for raw in json.loads(path.read_text())["cases"]:
            cases.append(Case(path.stem, len(cases), raw["name"], raw["steps"]))
    return cases


ALL = load()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    server = ServerThread(tmp_path_factory.mktemp("conformance") / "board").start()
    try:
        with Client(server.address, timeout=DEADLINE) as c:
            yield c
    finally:
        server.stop()


def test_case_names_are_unique_per_file() -> None:
    ids = [c.id for c in ALL]
    assert len(ids) == len(set(ids)), "two cases of one file share a name"


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_case(client: Client, case: Case) -> None:
    run = Run(client, case)
    try:
        for i, step in enumerate(case.steps):
            try:
                run.step(step)
            except AssertionError as e:
                raise AssertionError(f"step {i} {json.dumps(step)}: {e}") from None
    finally:
        run.cancel()


# ---------------------------------------------------------------- matching


def match(expect: Any, actual: Any, where: str = "") -> None:
    """Asserts that ``actual`` (a response in the JSON mapping; ``ABSENT``
    for a key the response lacks) matches ``expect`` as
    conformance/README.md says."""
    at = where or "response"
    if actual is ABSENT:
        raise AssertionError(f"{at}: absent, expected {expect!r}")
    if isinstance(expect, dict):
        assert isinstance(actual, dict), f"{at}: {actual!r} is not an object"
        for k in expect.get(NOT_SET, []):
            assert k not in actual, f"{at}: has {k} = {actual[k]!r}, expected it unset"
        for k, v in expect.items():
            if k != NOT_SET:
                match(v, actual.get(k, ABSENT), f"{where}.{k}" if where else k)
    elif isinstance(expect, list):
        assert isinstance(actual, list), f"{at}: {actual!r} is not an array"
        assert len(actual) == len(expect), f"{at}: {len(actual)} items, expected {len(expect)}"
        for i, (e, a) in enumerate(zip(expect, actual, strict=True)):
            match(e, a, f"{where}[{i}]")
    else:
        assert _same(expect, actual), f"{at}: {actual!r}, expected {expect!r}"


def _same(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, numbers) and isinstance(b, numbers):
        return a == b or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def lookup(value: Any, path: str) -> Any:
    """The part of a JSON value at ``path`` (``leaseIds[0]``, ``subscribed.id``)."""
    for name, index in PATH_PART.findall(path):
        value = value[int(index)] if index else value[name]
    return value


class Failure(Exception):
    """A failed call: the typed error the client raises for it, and the
    field paths of the status details' BadRequest."""

    def __init__(self, e: grpc.RpcError) -> None:
        super().__init__(str(e))
        self.error = rpc_error(e)
        self.fields: list[str] = []
        call: Any = e
        for key, value in call.trailing_metadata() or ():
            if key == DETAILS_KEY:
                for d in status_pb2.Status.FromString(value).details:
                    bad = error_details_pb2.BadRequest()
                    if d.Unpack(bad):
                        self.fields += [v.field for v in bad.field_violations]


def check_error(expect: dict[str, Any], f: Failure) -> None:
    """The failure ``f`` is the one ``expect`` describes: the client's typed
    error says the code, reason and field, and the BadRequest names the
    field too."""
    e = f.error
    got = {
        "code": e.code,
        "reason": type(e).__name__,
        "field": e.field if isinstance(e, InvalidArgument) else "",
    }
    for key in ("code", "reason", "field"):
        if key in expect:
            assert got[key] == expect[key], f"error {key} {got[key]!r}, expected {expect[key]!r}"
    if "field" in expect:
        assert f.fields == [expect["field"]], f"BadRequest fields {f.fields}"
    if "contains" in expect:
        assert expect["contains"] in str(e), f"error {str(e)!r} lacks {expect['contains']!r}"


def as_json(m: PbMessage) -> dict[str, Any]:
    return json_format.MessageToDict(m)


# ---------------------------------------------------------------- running

_STREAMS = {
    "Subscribe": (pb.SubscribeRequest, pb.SubscribeResponse),
    "PostStream": (pb.PostStreamRequest, pb.PostStreamResponse),
}
_END = object()


@dataclass
class Stream:
    """One open bidirectional call: requests go through a queue, responses
    are read on demand; ``held`` keeps responses a step passed over."""

    request_type: type[PbMessage]
    requests: queue.Queue[Any] = field(default_factory=queue.Queue)
    responses: Iterator[Any] = field(default_factory=lambda: iter(()))
    held: deque[dict[str, Any]] = field(default_factory=deque)
    call: Any = None

    def outgoing(self) -> Iterator[Any]:
        while (r := self.requests.get()) is not _END:
            yield r

    def next(self) -> dict[str, Any] | None:
        """The next response from the board (None at the stream's end)."""
        try:
            r = next(self.responses, None)
        except grpc.RpcError as e:
            raise Failure(e) from None
        if r is None:
            return None
        kind = r.WhichOneof("kind") if r.DESCRIPTOR.oneofs_by_name.get("kind") else None
        return {"kind": kind, "json": as_json(r)}


class Run:
    """One case's run: its variables and its open streams."""

    def __init__(self, client: Client, case: Case) -> None:
        self.client = client
        self.stub: Any = client._stub
        self.case = case
        self.vars: dict[str, Any] = {}
        self.streams: dict[str, Stream] = {}

    def step(self, step: dict[str, Any]) -> None:
        step = self.substitute(step)
        if "stream" in step:
            self.stream_step(step)
        else:
            self.unary(step)

    # -- variables

    def substitute(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self.substitute(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.substitute(v) for v in value]
        if isinstance(value, str):
            whole = VAR.fullmatch(value)
            if whole:
                return self.var(whole.group(1))
            return VAR.sub(lambda m: str(self.var(m.group(1))), value)
        return value

    def var(self, name: str) -> Any:
        if QUEUE_VAR.fullmatch(name):
            return f"{RUN}-{self.case.index}-{name}"
        assert name in self.vars, f"unknown variable ${{{name}}}"
        return self.vars[name]

    def capture(self, step: dict[str, Any], response: dict[str, Any]) -> None:
        for name, path in step.get("capture", {}).items():
            try:
                self.vars[name] = lookup(response, path)
            except (KeyError, IndexError) as e:
                raise AssertionError(f"capture {name}: no {path} in {response}") from e

    # -- unary calls

    def unary(self, step: dict[str, Any]) -> None:
        rpc = getattr(self.stub, step["call"])
        method = pb.DESCRIPTOR.services_by_name["Board"].methods_by_name[step["call"]]
        request_type = getattr(pb, method.input_type.name)
        request = json_format.ParseDict(step.get("request", {}), request_type())
        deadline = DEADLINE + _waits(request)
        try:
            response = rpc(request, timeout=deadline)
        except grpc.RpcError as e:
            f = Failure(e)
            assert "error" in step, f"failed: {type(f.error).__name__}: {f.error}"
            check_error(step["error"], f)
            return
        assert "error" not in step, f"succeeded: {as_json(response)}"
        got = as_json(response)
        if "expect" in step:
            match(step["expect"], got)
        self.capture(step, got)

    # -- streams

    def stream_step(self, step: dict[str, Any]) -> None:
        name = step["stream"]
        if name not in self.streams:
            assert "call" in step, f"stream {name} is not open and the step has no call"
            request_type, _ = _STREAMS[step["call"]]
            s = Stream(request_type)
            s.call = getattr(self.stub, step["call"])(s.outgoing(), timeout=DEADLINE * 2)
            s.responses = s.call
            self.streams[name] = s
        s = self.streams[name]
        if "send" in step:
            s.requests.put(json_format.ParseDict(step["send"], s.request_type()))
        if "receive" in step:
            got = self.receive(s, step["receive"])
            self.capture(step, got)
        if step.get("close") or step.get("end"):
            if step.get("close"):
                s.requests.put(_END)
            self.finish(s, step.get("error"))
            del self.streams[name]

    def receive(self, s: Stream, expect: dict[str, Any]) -> dict[str, Any]:
        kinds = {k for k in expect if k in ("subscribed", "deliveries", "error", "acked")}
        if not kinds or s.request_type is not pb.SubscribeRequest:
            got = self._next(s, None)
            match(expect, got)
            return got
        assert len(kinds) == 1, f"receive names {sorted(kinds)}: one kind per step"
        (kind,) = kinds
        if kind != "deliveries":
            got = self._next(s, kind)
            match(expect, got)
            return got
        assert set(expect) == {"deliveries"} and set(expect["deliveries"]) == {"items"}
        want = expect["deliveries"]["items"]
        items: list[Any] = []
        while len(items) < len(want):
            batch = self._next(s, "deliveries")["deliveries"]["items"]
            room = len(want) - len(items)
            items += batch[:room]
            if len(batch) > room:  # the rest for later steps
                s.held.appendleft({"deliveries": {"items": batch[room:]}})
        got = {"deliveries": {"items": items}}
        match(expect, got)
        return got

    def _next(self, s: Stream, kind: str | None) -> dict[str, Any]:
        """The next response of ``kind`` (any kind: None), held ones first."""
        for i, held in enumerate(s.held):
            if kind is None or kind in held:
                del s.held[i]
                return held
        while True:
            r = s.next()
            assert r is not None, f"the stream ended before a response of kind {kind}"
            if kind is None or r["kind"] == kind:
                return dict(r["json"])
            s.held.append(r["json"])

    def finish(self, s: Stream, error: dict[str, Any] | None) -> None:
        """Reads ``s`` to its end, which must be OK or ``error``."""
        try:
            while s.next() is not None:
                pass
        except Failure as f:
            assert error is not None, f"the stream ended with {type(f.error).__name__}: {f.error}"
            check_error(error, f)
            return
        assert error is None, "the stream ended OK"

    def cancel(self) -> None:
        for s in self.streams.values():
            s.requests.put(_END)
            if s.call is not None:
                s.call.cancel()


def _waits(request: PbMessage) -> float:
    """Seconds the request asks the board to wait (Take and Read timeouts)."""
    if isinstance(request, pb.TakeRequest | pb.ReadRequest) and request.HasField("timeout"):
        return float(request.timeout.ToTimedelta().total_seconds())
    return 0.0
