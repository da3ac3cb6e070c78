"""How the console shows a message: its envelope, typed tuple, headers and
body, as plain strings a template puts into the page (autoescaped, so a
body holding ``<script>`` is text, never markup).

- ``shown(m)``: a ``Shown``, every part of one message as rows of text;
- ``body_text``, ``body_json``, ``body_hex``: the body's three views (text
  as UTF-8, JSON pretty-printed, a hex dump), each bounded so that a large
  body never makes a page of megabytes; ``BODY_VIEWS`` names them and
  ``default_view`` picks one from the content type and the bytes;
- ``dead_letter_of(m)``: why and whence a dead letter came (the headers
  the board writes when it dead-letters a message);
- ``when(us)``: a board time (µs since the epoch) as ISO-8601 UTC;
  ``age(seconds)``: a span as a person reads it (``4 min 05 s``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from msgboard.associative import fields_to_json, type_of
from msgboard.message import Message, Value, to_datetime

#: Most body bytes shown as text or JSON; past it the page says how many more.
MAX_BODY_TEXT = 64 * 1024
#: Most body bytes shown as a hex dump (16 a line).
MAX_BODY_HEX = 16 * 1024
#: The body's views, in the order the page offers them.
BODY_VIEWS = ("text", "json", "hex")

#: The headers the board writes on a dead letter (``engine/overflow.py``).
DL_REASON = "x-dead-letter-reason"
DL_QUEUE = "x-dead-letter-queue"
DL_SEQ = "x-dead-letter-seq"


def when(us: int) -> str:
    """µs since the epoch as ISO-8601 UTC (``...Z``); "" for 0."""
    if not us:
        return ""
    return to_datetime(us).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def age(seconds: float) -> str:
    """A span in the two largest units that say it: ``0.4 s``, ``12 s``,
    ``4 min 05 s``, ``2 h 07 min``, ``3 d 04 h`` (a negative span, from a
    clock stepped back, is ``0.0 s``)."""
    s = max(0.0, seconds)
    if s < 10:
        return f"{s:.1f} s"
    whole = int(s)
    for unit, size, small, small_size in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if whole >= size:
            return f"{whole // size} {unit} {whole % size // small_size:02d} {small}"
    return f"{whole} s"


@dataclass(frozen=True, slots=True)
class FieldShown:
    """One tuple field: its position, type name and value as text."""

    index: int
    type: str
    text: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Why a message was dead-lettered and where it came from; ``seq`` 0
    when the message was never stored on its origin (a post that
    overflowed into the dead-letter queue)."""

    reason: str
    queue: str
    seq: int


@dataclass(frozen=True, slots=True)
class Shown:
    """A message as the page shows it."""

    queue: str
    seq: int
    section: str
    #: (label, value) rows of the envelope, only those set.
    envelope: list[tuple[str, str]]
    fields: list[FieldShown]
    #: The tuple in the CLI's JSON notation (what ``msgboard post --tuple`` takes).
    tuple_json: str
    headers: list[tuple[str, str]]
    content_type: str
    body_size: int
    dead_letter: DeadLetter | None


def value_text(v: Value) -> str:
    """A field's value as text that keeps its type readable: a float always
    with a point or exponent (``1.0``), bytes as hex, null as ``null``."""
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if type(v) is float:
        return repr(v) if math.isfinite(v) else str(v)
    if type(v) is bytes:
        return v.hex(" ") if v else "(empty)"
    return str(v)


def fields_shown(m: Message) -> list[FieldShown]:
    return [FieldShown(i, type_of(v).value, value_text(v)) for i, v in enumerate(m.tuple)]


def dead_letter_of(m: Message) -> DeadLetter | None:
    """The dead-letter headers of ``m``, if it has them."""
    h = m.headers
    if DL_REASON not in h and DL_QUEUE not in h:
        return None
    seq_text = h.get(DL_SEQ, "")
    seq = int(seq_text) if seq_text.isdigit() else 0
    return DeadLetter(h.get(DL_REASON, ""), h.get(DL_QUEUE, ""), seq)


def envelope(m: Message) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = [
        ("queue", m.queue),
        ("seq", str(m.seq)),
        ("section", m.section.value),
        ("address", m.address),
        ("priority", str(m.priority)),
    ]
    for label, text in (
        ("reply to", m.reply_to),
        ("key", m.key),
        ("content type", m.content_type),
        ("posted at", when(m.posted_at)),
        ("processed at", when(m.processed_at)),
        ("expires at", when(m.expires_at)),
        ("not before", when(m.not_before)),
        ("redelivered at", when(m.redeliver_at)),
    ):
        if text:
            rows.append((label, text))
    if m.delivery_count:
        rows.append(("deliveries", str(m.delivery_count)))
    if m.exit is not None:
        how = m.exit
        parts = [how.kind.value]
        to = f"{how.queue} #{how.seq}" if how.seq else how.queue
        parts += [f"{k} {v}" for k, v in (("reason", how.reason), ("to", to)) if v]
        if how.selector:
            parts.append(f"by {how.selector}")
        rows.append(("left", ", ".join(parts)))
    return rows


def shown(m: Message) -> Shown:
    """Every part of ``m`` as text rows (the body is asked for by view)."""
    return Shown(
        m.queue,
        m.seq,
        m.section.value,
        envelope(m),
        fields_shown(m),
        json.dumps(fields_to_json(m.tuple), ensure_ascii=False),
        sorted(m.headers.items()),
        m.content_type,
        len(m.body),
        dead_letter_of(m),
    )


@dataclass(frozen=True, slots=True)
class BodyView:
    """One view of a body: its lines of text, whether it could be shown this
    way (a body that is not JSON has no JSON view: ``error`` says why), and
    how many bytes were left out."""

    view: str
    text: str
    error: str = ""
    left_out: int = 0


def body_text(body: bytes) -> BodyView:
    """The body as UTF-8 text (undecodable bytes shown as U+FFFD)."""
    part = body[:MAX_BODY_TEXT]
    try:
        text, error = part.decode("utf-8"), ""
    except UnicodeDecodeError as e:
        if len(body) > MAX_BODY_TEXT and e.start >= len(part) - 3:
            # Cut in the middle of a character by the bound: not an error.
            text, error = part[: e.start].decode("utf-8"), ""
        else:
            text = part.decode("utf-8", errors="replace")
            error = f"not valid UTF-8 (byte {e.start}): shown with replacement characters"
    return BodyView("text", text, error, len(body) - len(part))


def body_json(body: bytes) -> BodyView:
    """The body pretty-printed as JSON, if it is JSON."""
    if len(body) > MAX_BODY_TEXT:
        return BodyView("json", "", f"larger than {MAX_BODY_TEXT} bytes: not parsed")
    try:
        obj = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return BodyView("json", "", f"not JSON: {e}")
    return BodyView("json", json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False))


def body_hex(body: bytes) -> BodyView:
    """A hex dump: offset, 16 bytes in hex, the printable ASCII beside."""
    part = body[:MAX_BODY_HEX]
    lines = []
    for off in range(0, len(part), 16):
        row = part[off : off + 16]
        hexes = " ".join(f"{b:02x}" for b in row)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{off:08x}  {hexes:<47}  |{ascii_}|")
    return BodyView("hex", "\n".join(lines), "", len(body) - len(part))


def default_view(content_type: str, body: bytes) -> str:
    """JSON for a JSON content type that parses, text for valid UTF-8, hex
    otherwise."""
    if "json" in content_type.lower() and not body_json(body).error:
        return "json"
    try:
        body[:MAX_BODY_TEXT].decode("utf-8")
    except UnicodeDecodeError as e:
        if not (len(body) > MAX_BODY_TEXT and e.start >= MAX_BODY_TEXT - 3):
            return "hex"
    return "text"


def body_view(body: bytes, view: str) -> BodyView:
    """The body in ``view`` (one of ``BODY_VIEWS``; anything else: text)."""
    if view == "json":
        return body_json(body)
    if view == "hex":
        return body_hex(body)
    return body_text(body)
