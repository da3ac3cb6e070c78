"""A board's definitions as one JSON file: its queues, its durable
selectors and its links, to keep, to copy to another board, or to build a
board again (issue 35; RabbitMQ's "definitions").

The file is the wire's own form of each spec, as proto JSON writes it
(``QueueSpec``, ``SelectorSpec``, ``LinkSpec`` of ``msgboard.v1``), so that
it says exactly what CreateQueue, CreateSelector and CreateLink take, and
any language's client can read it::

    {"format": "msgboard.definitions/1",
     "queues": [{"name": "orders", "maxUnprocessed": "1000", ...}, ...],
     "selectors": [{"source": "orders", "destination": "orders.eu", ...}],
     "links": [{"name": "central", "server": "10.0.0.2:7878"}]}

What it leaves out: session selectors (a subscription's own, gone with
it), the board's reserved queues (``$sys``, a link's outbox ``$link.ID``),
messages, and a link's secrets (its token and TLS key and certificates:
the board never shows them; give them again with ``msgboard link
create``). Selector ids are not kept: a board gives its own.

``apply`` creates what a target board lacks, in the order that works
(links, then the queues a dead-letter route names, then the others, then
the selectors), through a ``Target`` (the console's engine board, the
CLI's client). Queues are created idempotently (the same properties again
are no change; other properties under the name are an error, naming it);
a selector whose spec the board already has is skipped, so applying a
file twice creates nothing the second time. It is not one transaction:
an error stops it where it is, saying which entry, and what was created
before stays (applying the fixed file again finishes the job).

Used by the console (``/definitions``) and the CLI (``msgboard definitions
export|import``): the one place that reads and writes the file.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from msgboard.codec.specs import (
    link_spec_from_pb,
    link_spec_to_pb,
    selector_spec_from_pb,
    selector_spec_to_pb,
    spec_from_pb,
    spec_to_pb,
)
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.spec import OUTBOX, LinkSpec, QueueSpec, SelectorSpec
from msgboard.v1 import board_pb2 as pb

FORMAT = "msgboard.definitions/1"
T = TypeVar("T")
M = TypeVar("M", bound=Message)


@dataclasses.dataclass(frozen=True)
class Definitions:
    queues: list[QueueSpec] = dataclasses.field(default_factory=list)
    selectors: list[SelectorSpec] = dataclasses.field(default_factory=list)
    links: list[LinkSpec] = dataclasses.field(default_factory=list)


def kept(name: str) -> bool:
    """Whether a queue is a definition (not ``$sys`` nor a link's outbox)."""
    return not name.startswith("$") and not name.startswith(OUTBOX)


def definitions(
    queues: Sequence[QueueSpec], selectors: Sequence[SelectorSpec], links: Sequence[LinkSpec]
) -> Definitions:
    """What a board's listings hold that the file keeps (durable selectors
    only: the caller passes those), its secrets left out."""
    return Definitions(
        [q for q in queues if kept(q.name)],
        [s for s in selectors if kept(s.source) and kept(s.destination)],
        [_public(x) for x in links],
    )


def _public(spec: LinkSpec) -> LinkSpec:
    return LinkSpec(spec.name, spec.server, tls=spec.tls)


def _json(m: Any) -> dict[str, Any]:
    return dict(json_format.MessageToDict(m, preserving_proto_field_name=False))


def dumps(d: Definitions) -> str:
    """The file's text (JSON, indented, a newline at the end)."""
    body = {
        "format": FORMAT,
        "queues": [_json(spec_to_pb(q)) for q in d.queues],
        "selectors": [_json(selector_spec_to_pb(s)) for s in d.selectors],
        "links": [_json(link_spec_to_pb(x)) for x in d.links],
    }
    return json.dumps(body, indent=2, ensure_ascii=False) + "\n"


def loads(text: str | bytes) -> Definitions:
    """The definitions a file holds; InvalidArgument naming the entry and
    what is wrong (``queues[2]: ...``) for one that does not read."""
    try:
        body = json.loads(text)
    except ValueError as e:
        raise InvalidArgument(f"definitions: not JSON: {e}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise InvalidArgument(
            f'definitions: not a definitions file (its "format" must be "{FORMAT}")'
        )
    return Definitions(
        _read(body, "queues", pb.QueueSpec, spec_from_pb),
        _read(body, "selectors", pb.SelectorSpec, selector_spec_from_pb),
        _read(body, "links", pb.LinkSpec, link_spec_from_pb),
    )


def _read(body: dict[str, Any], key: str, message: type[M], convert: Callable[[M], T]) -> list[T]:
    entries = body.get(key, [])
    if not isinstance(entries, list):
        raise InvalidArgument(f"definitions: {key} must be a list", field=key)
    out = []
    for i, entry in enumerate(entries):
        try:
            out.append(convert(json_format.ParseDict(entry, message())))
        except (json_format.ParseError, MsgboardError, ValueError, TypeError) as e:
            raise InvalidArgument(f"{key}[{i}]: {e}", field=f"{key}[{i}]") from None
    return out


class Target(Protocol):
    """A board definitions are applied to."""

    def queue_names(self) -> set[str]: ...
    def selector_specs(self) -> list[SelectorSpec]: ...
    def link_names(self) -> set[str]: ...
    def create_queue(self, spec: QueueSpec) -> None: ...
    def create_selector(self, spec: SelectorSpec) -> None: ...
    def create_link(self, spec: LinkSpec) -> None: ...


@dataclasses.dataclass
class Applied:
    """What ``apply`` created, and what the board had already."""

    queues: list[str] = dataclasses.field(default_factory=list)
    selectors: int = 0
    links: list[str] = dataclasses.field(default_factory=list)
    unchanged: int = 0

    def text(self) -> str:
        return (
            f"created {len(self.queues)} queue(s), {self.selectors} selector(s), "
            f"{len(self.links)} link(s); {self.unchanged} already there"
        )


def apply(d: Definitions, target: Target) -> Applied:
    """Creates on ``target`` what it lacks of ``d`` (the module's story);
    an error is raised as the board gave it, its text prefixed with the
    entry (``queues[orders]: ...``)."""
    done = Applied()
    links = target.link_names()
    for x in d.links:
        if x.name in links:
            done.unchanged += 1
            continue
        _do(f"links[{x.name}]", partial(target.create_link, x))
        done.links.append(x.name)
    have = target.queue_names()
    dead = {q.dead_letter for q in d.queues if q.dead_letter}
    for q in sorted(d.queues, key=lambda q: (q.name not in dead, q.name)):
        _do(f"queues[{q.name}]", partial(target.create_queue, q))
        if q.name in have:
            done.unchanged += 1
        else:
            done.queues.append(q.name)
    existing = target.selector_specs()
    for i, s in enumerate(d.selectors):
        if s in existing:
            done.unchanged += 1
            continue
        _do(f"selectors[{i}]", partial(target.create_selector, s))
        existing.append(s)
        done.selectors += 1
    return done


def _do(where: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except MsgboardError as e:
        e.args = (f"{where}: {e}", *e.args[1:])
        raise
