"""How the ``msgboard`` command writes messages and rows, one a line (plain
text, or one JSON object with ``--json``), and how it reads a message from
a JSON object (``msgboard post --ndjson``).

A message's JSON object is the same both ways: what ``read --json`` prints
can be posted again. Reading it, the fields the board sets (``queue``,
``seq``, ``section``, ``posted_at`` …) are ignored; any other unknown key is
an error, so that a misspelt one is not dropped silently.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from datetime import UTC, datetime
from typing import IO, Any

from msgboard.associative import fields_to_json, parse_template, parse_tuple
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.message import Message, to_datetime


def json_arg(text: str, what: str) -> Any:
    """A command-line argument read as JSON; InvalidArgument naming it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"{what}: not JSON ({e.msg} at column {e.colno}): {text}") from None


def templates(args: Any) -> list[Any] | None:
    """The templates of ``--tuple`` (each a JSON template), None without."""
    if not args.tuple:
        return None
    return [parse_template(json_arg(t, "--tuple")) for t in args.tuple]


#: Keys of a message's JSON object that the board sets: ignored on input.
BOARD_KEYS = frozenset(
    {
        "queue",
        "seq",
        "section",
        "posted_at",
        "processed_at",
        "delivery_count",
        "exit",
        "delivery",
        "lease",
    }
)
_STRINGS = ("address", "reply_to", "content_type", "key")


def when(us: int) -> str | None:
    """µs since the epoch as ISO-8601 UTC (``...Z``); None for 0."""
    return to_datetime(us).isoformat().replace("+00:00", "Z") if us else None


def time_us(text: str, what: str) -> int:
    """An ISO-8601 time (UTC if no zone) as µs since the epoch."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"{what}: not a seq or an ISO time: {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1_000_000)


def message_json(m: Message) -> dict[str, Any]:
    """A message as a JSON object for --json output."""
    d: dict[str, Any] = {
        "queue": m.queue,
        "seq": m.seq,
        "section": m.section.value,
        "address": m.address,
        "tuple": fields_to_json(m.tuple),
        "headers": dict(m.headers),
        "priority": m.priority,
    }
    try:
        d["body"] = m.body.decode()
    except UnicodeDecodeError:
        d["body_base64"] = base64.b64encode(m.body).decode()
    for key, value in (
        ("content_type", m.content_type),
        ("reply_to", m.reply_to),
        ("key", m.key),
        ("posted_at", when(m.posted_at)),
        ("processed_at", when(m.processed_at)),
        ("expires_at", when(m.expires_at)),
        ("not_before", when(m.not_before)),
    ):
        if value:
            d[key] = value
    if m.delivery_count:
        d["delivery_count"] = m.delivery_count
    if m.exit is not None:  # how a history message left
        how = m.exit
        d["exit"] = {"kind": how.kind.value}
        for key, text in (("reason", how.reason), ("queue", how.queue), ("selector", how.selector)):
            if text:
                d["exit"][key] = text
        if how.seq:  # moved: its seq in exit.queue
            d["exit"]["seq"] = how.seq
    return d


def message_from_json(obj: object, expires_at: int = 0) -> Message:
    """A message to post from a decoded JSON object in ``message_json``'s
    shape; ``expires_at`` (µs) applies unless the object has its own.
    InvalidArgument naming the key for anything wrong."""
    if not isinstance(obj, dict):
        raise InvalidArgument(f"expected a JSON object, got {type(obj).__name__}")
    unknown = set(obj) - BOARD_KEYS - {*_STRINGS, "tuple", "headers", "priority", "body"}
    unknown -= {"body_base64", "expires_at", "not_before"}
    if unknown:
        raise InvalidArgument(f"unknown key {sorted(unknown)[0]!r}")
    kw: dict[str, Any] = {}
    for key in _STRINGS:
        if key in obj:
            kw[key] = _typed(obj, key, str)
    if "tuple" in obj:
        kw["tuple"] = parse_tuple(obj["tuple"])
    if "priority" in obj:
        kw["priority"] = _typed(obj, "priority", int)
    headers = _typed(obj, "headers", dict) if "headers" in obj else {}
    for k, v in headers.items():
        if not isinstance(v, str):
            raise InvalidArgument(f"headers.{k}: expected a string, got {type(v).__name__}")
    kw["headers"] = headers
    if "body" in obj and "body_base64" in obj:
        raise InvalidArgument("body: give body or body_base64, not both")
    if "body" in obj:
        kw["body"] = _typed(obj, "body", str).encode()
    elif "body_base64" in obj:
        try:
            kw["body"] = base64.b64decode(_typed(obj, "body_base64", str), validate=True)
        except binascii.Error:
            raise InvalidArgument("body_base64: not base64") from None
    own = obj.get("expires_at")
    kw["expires_at"] = time_us(own, "expires_at") if isinstance(own, str) else expires_at
    if own is not None and not isinstance(own, str):
        raise InvalidArgument("expires_at: expected an ISO time string")
    if "not_before" in obj:
        kw["not_before"] = time_us(_typed(obj, "not_before", str), "not_before")
    return Message(**kw)


def _typed(obj: dict[str, Any], key: str, kind: type) -> Any:
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidArgument(
            f"{key}: expected {kind.__name__}, got {type(value).__name__}: {json.dumps(value)}"
        )
    return value


def print_message(
    m: Message, as_json: bool, *, tags: dict[str, Any] | None = None, **extra: Any
) -> None:
    """One message, one line; ``extra`` keys (a delivery id) come first, in
    the JSON object or as plain columns; ``tags`` (a lease) come first in the
    JSON object, and after ``queue#seq`` as ``key=value`` columns, so that
    they do not read as the message's seq."""
    if as_json:
        print(json.dumps({**extra, **(tags or {}), **message_json(m)}), flush=True)
        return
    parts = [str(v) for v in extra.values()]
    parts.append(f"{m.queue}#{m.seq}")
    parts += [f"{k}={v}" for k, v in (tags or {}).items()]
    if m.address:
        parts.append(m.address)
    if m.tuple:
        parts.append(json.dumps(fields_to_json(m.tuple)))
    if m.body:
        body = m.body.decode(errors="replace")
        parts.append(body if len(body) <= 80 else body[:77] + "...")
    print("  ".join(parts), flush=True)


def print_row(d: dict[str, Any], as_json: bool) -> None:
    """A row of figures: a JSON object, or ``key=value`` columns."""
    print(json.dumps(d) if as_json else "  ".join(f"{k}={v}" for k, v in d.items()), flush=True)


def print_rows(rows: list[dict[str, Any]], as_json: bool, stream: IO[str] | None = None) -> None:
    """Rows of figures: on a terminal (and not ``--json``) one table with a
    header and aligned columns (numbers to the right); otherwise one
    ``print_row`` each (``key=value`` columns, or JSON objects)."""
    out = stream or sys.stdout
    if as_json or not rows or not out.isatty():
        for d in rows:
            print(
                json.dumps(d) if as_json else "  ".join(f"{k}={v}" for k, v in d.items()), file=out
            )
        out.flush()
        return
    keys = list(dict.fromkeys(k for d in rows for k in d))
    cells = [[_cell(d.get(k)) for k in keys] for d in rows]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    numeric = [all(_is_number(d.get(k)) for d in rows) for k in keys]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    print(line(keys), file=out)
    for c in cells:
        print(line(c), file=out)
    out.flush()


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def note(text: str) -> None:
    """A line for a person on stderr, only when stderr is a terminal (a
    script reads the exit status and stdout)."""
    if sys.stderr.isatty():
        print(f"msgboard: {text}", file=sys.stderr, flush=True)


def report_error(e: MsgboardError, as_json: bool, about: dict[str, Any] | None = None) -> None:
    """An error on stderr: one JSON object under --json
    (``{"error": {"code", "name", "message"}}``, after the keys of ``about``:
    what the error is about, ``{"lease": 7}``), else one line."""
    if as_json:
        error = {"code": e.code, "name": type(e).__name__, "message": str(e)}
        print(json.dumps({**(about or {}), "error": error}), file=sys.stderr, flush=True)
    else:
        print(f"msgboard: {e.code}: {e}", file=sys.stderr, flush=True)
