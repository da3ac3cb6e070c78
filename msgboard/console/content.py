"""A message as the console shows it: every part as text, never markup.

``shown(m)`` turns a message into plain strings a template prints (and
Jinja2's autoescape makes inert): its envelope, its typed tuple (each field
with its type, so int 1, float 1.0, null and bytes stay apart), its
headers, and its body as text (UTF-8), JSON pretty-printed (a JSON content
type, or text that parses as JSON), or hex (anything else), cut at
``MAX_BODY`` bytes. ``templates/message.html``'s ``message`` macro prints
it; every page that shows a message uses both (overview's peek, browse,
dead letters).
"""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime

from msgboard.message import Message, Value

#: Bytes of a body shown at most.
MAX_BODY = 64 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    type: str
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Shown:
    queue: str
    seq: int
    section: str
    address: str
    priority: int
    posted_at: str
    reply_to: str
    key: str
    content_type: str
    fields: list[Field]
    headers: list[tuple[str, str]]
    #: "text", "json", "hex" or "empty".
    body_kind: str
    body: str
    body_bytes: int
    cut: bool


def field(v: Value) -> Field:
    """One tuple field, typed."""
    if v is None:
        return Field("null", "null")
    if isinstance(v, bool):
        return Field("bool", "true" if v else "false")
    if isinstance(v, int):
        return Field("int", str(v))
    if isinstance(v, float):
        return Field("float", repr(v) if math.isfinite(v) else str(v))
    if isinstance(v, bytes):
        return Field("bytes", "0x" + v.hex())
    return Field("string", v)


def when(us: int) -> str:
    """µs since the epoch as an ISO time (UTC); "" for 0."""
    if not us:
        return ""
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="milliseconds")


def body(m: Message) -> tuple[str, str, bool]:
    """The body's kind, its text, and whether it was cut."""
    raw = m.body[:MAX_BODY]
    cut = len(m.body) > MAX_BODY
    if not raw:
        return "empty", "", False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", raw.hex(" ", 1), cut
    if "json" in m.content_type or text.lstrip()[:1] in ("{", "["):
        try:
            return "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False), cut
        except ValueError:
            pass
    return "text", text, cut


def shown(m: Message) -> Shown:
    kind, text, cut = body(m)
    return Shown(
        queue=m.queue,
        seq=m.seq,
        section=m.section.name.lower(),
        address=m.address,
        priority=m.priority,
        posted_at=when(m.posted_at),
        reply_to=m.reply_to,
        key=m.key,
        content_type=m.content_type,
        fields=[field(v) for v in m.tuple],
        headers=sorted(m.headers.items()),
        body_kind=kind,
        body=text,
        body_bytes=len(m.body),
        cut=cut,
    )
