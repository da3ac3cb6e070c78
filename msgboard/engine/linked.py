"""Links to other boards as the engine keeps them, and the outboxes of the
selectors that cross them.

A link (``LinkSpec``) is a record of the store (``links`` in
``lmdbstore/layout.py``): created, listed and deleted here, inside group
commits like every other write, so that a selector created in the same
moment as a link is deleted never names a link that is gone. Connecting,
forwarding and the figures of a running link are the business of
``msgboard.links``, above the engine, which reads these records.

A crossing selector (``SelectorSpec.destination_link``) is an ordinary
MOVE or COPY into its *outbox*, the board's own queue ``$link.`` + its id,
made with the selector and deleted with it; ``msgboard.links`` drains the
outbox across the link, oldest first. The selector keeps the spec it was
created with (the remote queue in ``destination``) for the store and the
views, and routes with the same spec pointed at its outbox
(``routed``). A MOVE's outbox holds at most ``MOVE_WINDOW`` messages, so
that what the remote board has no room for yet waits on the source queue,
where other selectors may still take it; a COPY's outbox has no limit,
because a copy that finds no room is lost. Appending into an outbox stamps
the message with the hop count it reached (``HOPS``) and where it comes
from (``ORIGIN_QUEUE``, ``ORIGIN_SEQ``), the facts the link carries.
"""

from __future__ import annotations

import dataclasses
import re
from concurrent.futures import Future

from msgboard.engine import events as ev
from msgboard.engine.events import Events
from msgboard.engine.federation import Pulls
from msgboard.engine.table import Table
from msgboard.engine.writer import Batch, Writer
from msgboard.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from msgboard.message import Message
from msgboard.spec import (
    HOPS,
    ORIGIN_QUEUE,
    ORIGIN_SEQ,
    LinkSpec,
    Op,
    QueueSpec,
    Role,
    SelectorSpec,
    outbox,
)

#: Most messages a crossing MOVE keeps in its outbox.
MOVE_WINDOW = 256
_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")


def check_link(spec: LinkSpec) -> LinkSpec:
    """``spec``, or InvalidArgument naming its bad field (``spec.name``,
    ``spec.server``, ``spec.tls_key_pem``)."""
    if not isinstance(spec.name, str) or not _NAME.fullmatch(spec.name):
        raise InvalidArgument(
            f"spec.name: {spec.name!r} is not a link name (1-64 letters, digits or '._-')"
        )
    servers = [a.strip() for a in spec.server.split(",")] if spec.server else []
    if not servers:
        raise InvalidArgument("spec.server: the remote board's address is needed (HOST:PORT)")
    for a in servers:
        m = _ADDRESS.fullmatch(a)
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise InvalidArgument(
                f"spec.server: {a!r} is not an address (HOST:PORT, several separated by ',')"
            )
    if bool(spec.tls_cert_pem) != bool(spec.tls_key_pem):
        field = "tls_key_pem" if spec.tls_cert_pem else "tls_cert_pem"
        raise InvalidArgument(f"spec.{field}: a client certificate and its key go together")
    for field in ("tls_ca_pem", "tls_cert_pem"):
        pem = getattr(spec, field)
        if pem and "-----BEGIN CERTIFICATE-----" not in pem:
            raise InvalidArgument(f"spec.{field}: not a PEM certificate")
    if spec.tls_key_pem and "PRIVATE KEY-----" not in spec.tls_key_pem:
        raise InvalidArgument("spec.tls_key_pem: not a PEM private key")
    return dataclasses.replace(spec, server=",".join(servers))


def check_crossing(spec: SelectorSpec, where: str = "spec") -> None:
    """InvalidArgument unless ``spec``, a crossing selector, can cross."""
    if not _NAME.fullmatch(spec.destination_link):
        raise InvalidArgument(
            f"{where}.destination_link: {spec.destination_link!r} is not a link name"
        )
    if spec.op not in (Op.MOVE, Op.COPY):
        raise InvalidArgument(f"{where}.op: a selector across a link moves or copies")
    if spec.role is not Role.NORMAL:
        raise InvalidArgument(f"{where}.role: a selector across a link has the normal role")
    if not spec.destination:
        raise InvalidArgument(f"{where}.destination: the queue on the linked board is needed")


def routed(sid: str, spec: SelectorSpec) -> SelectorSpec:
    """The spec a crossing selector routes with: into its outbox."""
    return dataclasses.replace(spec, destination=outbox(sid))


def outbox_spec(sid: str, spec: SelectorSpec, transient: bool) -> QueueSpec:
    """The queue a crossing selector's outbox is."""
    return QueueSpec(
        outbox(sid),
        max_unprocessed=MOVE_WINDOW if spec.op is Op.MOVE else 0,
        max_history=0,
        transient=transient,
        dedup_window=0,
    )


def stamped(msg: Message, hops: int, source: str, seq: int) -> Message:
    """``msg`` (on its way into an outbox from ``source``, where it had
    ``seq``) with its hop count and origin in its headers."""
    headers = {**msg.headers, HOPS: str(hops), ORIGIN_QUEUE: source, ORIGIN_SEQ: str(seq)}
    return dataclasses.replace(msg, headers=headers)


def hop_count(text: str) -> int:
    """The hop count a message's ``HOPS`` header says (0 if it says none)."""
    return int(text) if text.isdigit() and len(text) < 6 else 0


class Linked:
    """The board's links (writer thread, apart from the calls' checks)."""

    def __init__(self, writer: Writer, events: Events, table: Table, pulls: Pulls) -> None:
        self._writer = writer
        self._events = events
        self._table = table
        #: The pull selectors (``federation.py``), which cross links too.
        self.pulls = pulls
        #: Every link, by name, as committed or in the running group.
        self.specs: dict[str, LinkSpec] = {}

    def load(self, b: Batch) -> None:
        """Reads the stored links (one read per link) at start."""
        self.specs = {s.name: s for s in b.txn(True).links()}

    def require(self, name: str, where: str = "spec.destination_link") -> LinkSpec:
        """The link ``name``; FailedPrecondition naming it if there is none."""
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self.specs)) or "none"
            raise FailedPrecondition(
                f"{where}: no link named {name!r} on this board (links: {known}); "
                f"create it first (msgboard link create {name} --server HOST:PORT)"
            )
        return spec

    def create_link_async(self, spec: LinkSpec) -> Future[LinkSpec]:
        """Stores a link; the same spec again returns it, another spec under
        its name is AlreadyExists."""
        spec = check_link(spec)

        def run(b: Batch) -> LinkSpec:
            found = self.specs.get(spec.name)
            if found is not None:
                if found != spec:
                    raise AlreadyExists(
                        f"link {spec.name!r} exists with other settings "
                        f"(server {found.server!r}); delete it first"
                    )
                return found
            b.txn(True).put_link(spec)
            self._put(b, spec.name, spec)
            self._events.emit(b, ev.LINK_CREATED, spec.name, spec.server)
            return spec

        return self._writer.submit(run)

    def delete_link_async(self, name: str) -> Future[None]:
        """Deletes a link; NotFound if there is none, FailedPrecondition
        naming them while selectors cross it."""

        def run(b: Batch) -> None:
            if name not in self.specs:
                raise NotFound(f"no link named {name!r}")
            crossing = self.crossing(name)
            if crossing:
                raise FailedPrecondition(
                    f"link {name!r} is used by selector(s) {', '.join(crossing)}: delete them first"
                )
            b.txn(True).delete_link(name)
            self._put(b, name, None)
            self._events.emit(b, ev.LINK_DELETED, name)

        return self._writer.submit(run)

    def crossing(self, name: str) -> list[str]:
        """The ids of the selectors that cross link ``name``."""
        sels = self._table.selectors.values()
        pushes = [s.id for s in sels if s.spec.destination_link == name]
        return sorted(pushes + self.pulls.across(name))

    def list_links_async(self) -> Future[list[LinkSpec]]:
        """Every link, by name."""
        return self._writer.submit(lambda b: [self.specs[n] for n in sorted(self.specs)])

    def _put(self, b: Batch, name: str, spec: LinkSpec | None) -> None:
        old = self.specs.get(name)
        if spec is None:
            self.specs.pop(name, None)
        else:
            self.specs[name] = spec

        def undo() -> None:
            if old is None:
                self.specs.pop(name, None)
            else:
                self.specs[name] = old

        b.undo(undo)
