"""The text notation the CLI uses for tuples, templates and address patterns.

Tuples and templates are JSON arrays, one element per field, parsed here
after ``json.loads``:

- JSON null, true/false, numbers and strings are actual values. Numbers keep
  their JSON spelling: ``1`` is an int, ``1.0`` a float.
- In a template, ``"?"`` is ANY and ``"?int"``, ``"?float"``, ``"?str"``,
  ``"?bytes"``, ``"?bool"``, ``"?null"`` are formals;
  ``{"range": [lo, hi]}`` (two numbers or two strings) and
  ``{"prefix": "s"}`` (or ``{"prefix": {"bytes": "<base64>"}}``) are patterns.
- Escapes, in tuples and templates alike: ``{"bytes": "<base64>"}`` is a
  bytes value; ``{"value": x}`` is the JSON scalar ``x`` taken literally, the
  way to write a string that starts with ``?``.

A tuple refuses strings starting with ``?`` and pattern objects, so that
the same JSON never means a pattern in one place and a value in another;
``fields_to_json`` and ``template_to_json`` write output that reads back
unchanged.

Address patterns are ``all``, ``eq:NAME``, ``topic:rec.pets.*``,
``prefix:P``; another ``KIND:`` of letters (``regex:img.*``) is refused;
anything else is an exact address (write ``eq:all``, ``eq:topic:x`` or
``eq:regex:x`` for addresses that look like the other forms).
"""

from __future__ import annotations

import base64
import binascii

from msgboard.associative.address import ALL, AddressPattern
from msgboard.associative.template import (
    ANY,
    Actual,
    AnyField,
    FieldPattern,
    Formal,
    Prefix,
    Range,
    Template,
)
from msgboard.associative.tuples import MAX_ARITY, ValueType, check_value, located
from msgboard.errors import InvalidArgument
from msgboard.message import Fields, Value

__all__ = [
    "fields_to_json",
    "parse_address",
    "parse_template",
    "parse_tuple",
    "template_to_json",
]

_FORMALS = {"?" + vt.value: vt for vt in ValueType}
_FORMAL_NAMES = ", ".join(["?", *_FORMALS])
_ADDRESS_KINDS = ("eq", "topic", "prefix")


def _json_type(x: object) -> str:
    if x is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(x), type(x).__name__
    )


def _array(obj: object, where: str) -> list[object]:
    if not isinstance(obj, list):
        raise InvalidArgument(f"{where}: expected a JSON array, got {_json_type(obj)}")
    if len(obj) > MAX_ARITY:
        raise InvalidArgument(f"{where}: {len(obj)} fields, at most {MAX_ARITY}")
    return obj


def _single_key(obj: dict[object, object], where: str) -> tuple[str, object]:
    if len(obj) != 1:
        raise InvalidArgument(f"{where}: an object must have exactly one key, not {len(obj)}")
    ((key, arg),) = obj.items()
    return str(key), arg


def _b64(arg: object, where: str) -> bytes:
    if type(arg) is not str:
        raise InvalidArgument(f"{where}: bytes must be a base64 string, not {_json_type(arg)}")
    try:
        return base64.b64decode(arg, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument(f"{where}: {arg!r} is not valid base64") from None


def _escape(key: str, arg: object, where: str) -> Value:
    """The value of a {"bytes": ...} or {"value": ...} escape."""
    if key == "bytes":
        return _b64(arg, where)
    if isinstance(arg, dict | list):
        raise InvalidArgument(f"{where}: value must be a JSON scalar, not {_json_type(arg)}")
    return check_value(arg, where)


def parse_tuple(obj: object, where: str = "tuple") -> Fields:
    """A tuple to post, from a decoded JSON array; no patterns allowed."""
    fields: list[Value] = []
    for i, x in enumerate(_array(obj, where)):
        w = f"{where}[{i}]"
        if type(x) is str and x.startswith("?"):
            raise InvalidArgument(
                f'{w}: {x!r} is a pattern, not a value; write {{"value": {x!r}}} '
                "for a string that starts with '?'"
            )
        if isinstance(x, dict):
            key, arg = _single_key(x, w)
            if key in ("bytes", "value"):
                fields.append(_escape(key, arg, w))
                continue
            if key in ("range", "prefix"):
                raise InvalidArgument(f"{w}: {key} is a pattern; a tuple holds values only")
            raise InvalidArgument(f"{w}: unknown key {key!r} (expected bytes or value)")
        fields.append(check_value(x, w))
    return tuple(fields)


def parse_template(obj: object, where: str = "template") -> Template:
    """A template from a decoded JSON array."""
    return Template(
        tuple(_field_pattern(x, f"{where}[{i}]") for i, x in enumerate(_array(obj, where)))
    )


def _field_pattern(x: object, where: str) -> FieldPattern:
    if type(x) is str and x.startswith("?"):
        if x == "?":
            return ANY
        vt = _FORMALS.get(x)
        if vt is None:
            raise InvalidArgument(
                f"{where}: unknown formal {x!r} (one of {_FORMAL_NAMES}); "
                f'write {{"value": {x!r}}} for the literal string'
            )
        return Formal(vt)
    if not isinstance(x, dict):
        return Actual(check_value(x, where))
    key, arg = _single_key(x, where)
    if key == "range":
        if not isinstance(arg, list) or len(arg) != 2:
            raise InvalidArgument(f"{where}: range must be an array [lo, hi]")
        lo, hi = arg
        with located(where):
            return Range(lo, hi)
    if key == "prefix":
        p: object = arg
        if isinstance(arg, dict):
            k, a = _single_key(arg, f"{where}.prefix")
            if k != "bytes":
                raise InvalidArgument(f'{where}.prefix: expected a string or {{"bytes": ...}}')
            p = _b64(a, f"{where}.prefix")
        with located(where):
            return Prefix(p)  # type: ignore[arg-type]
    if key in ("bytes", "value"):
        return Actual(_escape(key, arg, where))
    raise InvalidArgument(f"{where}: unknown key {key!r} (expected range, prefix, bytes or value)")


def fields_to_json(fields: Fields) -> list[object]:
    """A tuple as JSON-ready Python, in the notation ``parse_tuple`` reads."""
    out: list[object] = []
    for v in fields:
        if type(v) is bytes:
            out.append({"bytes": base64.b64encode(v).decode("ascii")})
        elif type(v) is str and v.startswith("?"):
            out.append({"value": v})
        else:
            out.append(v)
    return out


def template_to_json(t: Template) -> list[object]:
    """A template as JSON-ready Python, in the notation ``parse_template``
    reads (a selector's pattern shown as the CLI would take it)."""
    return [_field_to_json(f) for f in t.fields]


def _field_to_json(f: FieldPattern) -> object:
    if isinstance(f, AnyField):
        return "?"
    if isinstance(f, Formal):
        return "?" + f.type.value
    if isinstance(f, Range):
        return {"range": [f.lo, f.hi]}
    if isinstance(f, Prefix):
        p = f.p
        if type(p) is bytes:
            return {"prefix": {"bytes": base64.b64encode(p).decode("ascii")}}
        return {"prefix": p}
    (v,) = fields_to_json((f.value,))
    return v


def parse_address(text: str, where: str = "address") -> AddressPattern:
    """``all``, ``eq:NAME``, ``topic:WORDS``, ``prefix:P``, or a bare exact
    address. A bare text that starts like a kind, letters then a colon
    (``regex:img.*``, ``glob:a*``), is refused: a pattern language this
    board does not have would otherwise be read as an exact address and
    match nothing, silently; ``eq:`` gives such an address exactly."""
    if type(text) is not str:
        raise InvalidArgument(f"{where}: expected a string, got {type(text).__name__}")
    if text == "all":
        return ALL
    kind, sep, rest = text.partition(":")
    if sep and kind not in _ADDRESS_KINDS and kind.isascii() and kind.isalpha():
        raise InvalidArgument(
            f"{where}: {text!r}: {kind!r} is not a kind of address pattern (all, eq:, "
            f"topic:, prefix:); the exact address {text!r} is eq:{text}",
            field=where,
        )
    with located(where):
        if sep and kind in _ADDRESS_KINDS:
            return AddressPattern(kind, rest)
        return AddressPattern.eq(text)
