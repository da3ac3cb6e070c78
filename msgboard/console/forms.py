"""What the console's forms say, read into the board's own types, with the
CLI's notation (``msgboard.associative.notation``) wherever the CLI has one,
so that what works on the command line works in the page:

- ``PatternForm``: a pattern from a form's ``template`` (one JSON template
  a line, each an alternative, as ``--tuple`` repeated), ``address``
  (``all``, ``eq:``, ``topic:``, ``prefix:`` or an exact address, as
  ``--address``) and ``filter`` (the SQL-92 selector syntax, as ``--filter``);
- ``typed_tuple``: the compose page's tuple editor, one row per field with
  its type chosen from a list, so that ``1`` as int and ``1`` as float stay
  two values, null is a type of its own and bytes are written in hex;
- ``headers_from_text``: ``name: value`` lines;
- ``int_field``: a whole number from a form, or an error naming the field;
- ``href``, ``browse_href``: links to a page with its form filled in;
- ``choices``: the queues a chooser lists (bounded).

Every error is an ``InvalidArgument`` whose text says which field and what
is wrong (``tuple[2]: 'x' is not an int``); the page shows it beside the
form, which keeps what was typed.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from aiohttp import web

from msgboard.associative import (
    ALL,
    EVERYTHING,
    Pattern,
    parse_address,
    parse_template,
    template_to_json,
)
from msgboard.associative.tuples import MAX_ARITY, check_value
from msgboard.errors import InvalidArgument, MsgboardError
from msgboard.message import Fields, Value

#: Queues a chooser (a ``<select>``) lists at most: the first by name, and
#: the one chosen (a page for a queue past them is reached by its address).
MAX_CHOICES = 1000
#: The types the tuple editor offers, in its list's order.
FIELD_TYPES = ("str", "int", "float", "bool", "null", "bytes")
_INT = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class PatternForm:
    """A pattern's three parts as typed into a form (kept for showing the
    form again), and the pattern they make."""

    template: str = ""
    address: str = ""
    filter: str = ""

    @classmethod
    def of(cls, form: Mapping[str, str], prefix: str = "") -> PatternForm:
        """The parts from a query or form (absent keys: empty); ``prefix``:
        what the fields' names start with, in a form that has other fields
        of those names (compose's ``address``)."""
        return cls(
            form.get(prefix + "template", "").strip(),
            form.get(prefix + "address", "").strip(),
            form.get(prefix + "filter", "").strip(),
        )

    @property
    def empty(self) -> bool:
        return not (self.template or self.address or self.filter)

    def pattern(self) -> Pattern:
        """The pattern; InvalidArgument naming the part that is wrong."""
        if self.empty:
            return EVERYTHING
        templates = []
        for n, line in enumerate(self.template.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidArgument(
                    f"template line {n}: not JSON: {e.msg} (column {e.colno})"
                ) from None
            templates.append(parse_template(obj, f"template line {n}"))
        address = parse_address(self.address) if self.address else ALL
        return Pattern(address, tuple(templates), self.filter)

    @classmethod
    def of_pattern(cls, p: Pattern) -> PatternForm:
        """``p`` in the CLI's notation, as the form takes it (a selector's
        pattern, filled into Browse)."""
        templates = "\n".join(json.dumps(template_to_json(t)) for t in p.templates)
        address = "" if p.address.kind == "all" else str(p.address)
        return cls(templates, address, p.filter)

    def query(self) -> dict[str, str]:
        """The non-empty parts, for a link that keeps them."""
        return {k: v for k, v in self.items() if v}

    def items(self) -> list[tuple[str, str]]:
        return [("template", self.template), ("address", self.address), ("filter", self.filter)]


def choices(names: list[str], chosen: str = "") -> list[str]:
    """``names`` (in order) for a chooser: at most ``MAX_CHOICES``, and
    ``chosen`` among them if it is one of ``names``."""
    out = names[:MAX_CHOICES]
    if chosen and chosen not in out and chosen in names:
        out.append(chosen)
    return out


def href(path: str, **query: str) -> str:
    """``path`` with ``query`` (empty values left out) URL-encoded."""
    q = {k: v for k, v in query.items() if v}
    return f"{path}?{urlencode(q)}" if q else path


def browse_href(queue: str, form: PatternForm | None = None) -> str:
    """The Browse page of ``queue``, with ``form``'s pattern filled in."""
    return href(f"/browse/{quote(queue, safe='')}", **(form.query() if form else {}))


def field_value(kind: str, text: str, where: str) -> Value:
    """One field of the tuple editor: ``text`` read as ``kind``."""
    if kind == "str":
        return text
    if kind == "null":
        if text.strip() not in ("", "null"):
            raise InvalidArgument(f"{where}: a null field has no value (got {text!r})")
        return None
    t = text.strip()
    if kind == "int":
        if not _INT.fullmatch(t):
            raise InvalidArgument(f"{where}: {text!r} is not an int (digits, an optional sign)")
        return check_value(int(t), where)
    if kind == "float":
        try:
            return float(t)
        except ValueError:
            raise InvalidArgument(f"{where}: {text!r} is not a float") from None
    if kind == "bool":
        low = t.lower()
        if low not in ("true", "false"):
            raise InvalidArgument(f"{where}: {text!r} is not a bool (true or false)")
        return low == "true"
    if kind == "bytes":
        digits = re.sub(r"[\s:]", "", t)
        if digits.startswith(("0x", "0X")):
            digits = digits[2:]
        try:
            return bytes.fromhex(digits)
        except ValueError:
            raise InvalidArgument(
                f"{where}: {text!r} is not hex (two digits a byte; spaces allowed)"
            ) from None
    raise InvalidArgument(f"{where}: unknown type {kind!r} (one of {', '.join(FIELD_TYPES)})")


def typed_tuple(kinds: Sequence[str], texts: Sequence[str], where: str = "tuple") -> Fields:
    """The tuple editor's rows (a type and a text each, in order) as a tuple."""
    if len(kinds) != len(texts):
        raise InvalidArgument(f"{where}: {len(kinds)} types but {len(texts)} values")
    if len(kinds) > MAX_ARITY:
        raise InvalidArgument(f"{where}: {len(kinds)} fields, at most {MAX_ARITY}")
    return tuple(
        field_value(k, t, f"{where}[{i}]")
        for i, (k, t) in enumerate(zip(kinds, texts, strict=True))
    )


def field_row(v: Value) -> tuple[str, str]:
    """A field as the editor's (type, text): what ``field_value`` reads back."""
    if v is None:
        return "null", ""
    if v is True or v is False:
        return "bool", "true" if v else "false"
    if type(v) is int:
        return "int", str(v)
    if type(v) is float:
        return "float", repr(v)
    if type(v) is bytes:
        return "bytes", binascii.hexlify(v, " ").decode()
    return "str", str(v)


def headers_from_text(text: str, where: str = "headers") -> dict[str, str]:
    """``name: value`` lines (blank lines skipped) as headers."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise InvalidArgument(f"{where} line {n}: expected 'name: value', got {line!r}")
        out[name.strip()] = value.strip()
    return out


def int_field(form: Mapping[str, str], name: str, default: int = 0) -> int:
    """The whole number in ``form[name]`` (blank: ``default``)."""
    text = form.get(name, "").strip()
    if not text:
        return default
    if not _INT.fullmatch(text):
        raise InvalidArgument(f"{name}: {text!r} is not a whole number")
    return int(text)


#: An engine error's gRPC status name -> the HTTP status a page answers with.
HTTP_STATUS = {
    "INVALID_ARGUMENT": 400,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "FAILED_PRECONDITION": 409,
    "RESOURCE_EXHAUSTED": 409,
    "PERMISSION_DENIED": 403,
    "UNAVAILABLE": 503,
}


_ANSWERS: dict[int, type[web.HTTPException]] = {
    400: web.HTTPBadRequest,
    403: web.HTTPForbidden,
    404: web.HTTPNotFound,
    409: web.HTTPConflict,
    503: web.HTTPServiceUnavailable,
}


def http_status(e: MsgboardError) -> int:
    """The HTTP status for a page whose request the board refused with ``e``."""
    return HTTP_STATUS.get(e.code, 500)


def refused(e: MsgboardError) -> web.HTTPException:
    """The answer to raise for a request the board refused with ``e``: its
    status (``http_status``) and the error's text, which says what is wrong."""
    return _ANSWERS.get(http_status(e), web.HTTPInternalServerError)(text=str(e))
