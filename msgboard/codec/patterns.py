"""Patterns as protobufs: field patterns, templates, address patterns and
the Pattern that holds them (``msgboard.associative`` says what they mean).

Reading one checks it: a malformed part is InvalidArgument naming its path
(``pattern.templates[0].fields[2].range: lo and hi are both required``).
Writing one cannot fail, as a Pattern is valid by construction.
"""

from __future__ import annotations

from msgboard.associative import (
    ALL,
    ANY,
    MAX_ARITY,
    Actual,
    AddressPattern,
    AnyField,
    FieldPattern,
    Formal,
    Pattern,
    Prefix,
    Range,
    Template,
)
from msgboard.associative.tuples import located
from msgboard.codec.enums import VALUE_TYPE
from msgboard.codec.messages import value_from_pb, value_to_pb
from msgboard.errors import InvalidArgument
from msgboard.v1 import board_pb2 as pb


def field_pattern_to_pb(f: FieldPattern, out: pb.FieldPattern) -> None:
    """Fills ``out`` with ``f`` (valid by construction, so this cannot fail)."""
    if isinstance(f, Actual):
        value_to_pb(f.value, out.actual)
    elif isinstance(f, Formal):
        out.formal = VALUE_TYPE.to_pb[f.type]
    elif isinstance(f, AnyField):
        out.any.SetInParent()
    elif isinstance(f, Range):
        value_to_pb(f.lo, out.range.lo)
        value_to_pb(f.hi, out.range.hi)
    else:
        value_to_pb(f.p, out.prefix)


def field_pattern_from_pb(p: pb.FieldPattern, where: str = "field") -> FieldPattern:
    """A field pattern; InvalidArgument naming ``where`` if it is malformed."""
    kind = p.WhichOneof("kind")
    if kind is None:
        raise InvalidArgument(f"{where}: no kind set")
    if kind == "actual":
        return Actual(value_from_pb(p.actual, f"{where}.actual"))
    if kind == "formal":
        vt = VALUE_TYPE.from_pb.get(p.formal)
        if vt is None:
            raise InvalidArgument(f"{where}.formal: {p.formal} is not a value type")
        return Formal(vt)
    if kind == "any":
        return ANY
    if kind == "range":
        r = p.range
        if not r.HasField("lo") or not r.HasField("hi"):
            raise InvalidArgument(f"{where}.range: lo and hi are both required")
        lo = value_from_pb(r.lo, f"{where}.range.lo")
        hi = value_from_pb(r.hi, f"{where}.range.hi")
        with located(where):
            return Range(lo, hi)  # type: ignore[arg-type]  # Range checks the types
    v = value_from_pb(p.prefix, f"{where}.prefix")
    with located(where):
        return Prefix(v)  # type: ignore[arg-type]  # Prefix checks the type


def template_to_pb(t: Template, out: pb.Template | None = None) -> pb.Template:
    p = pb.Template() if out is None else out
    for f in t.fields:
        field_pattern_to_pb(f, p.fields.add())
    return p


def template_from_pb(p: pb.Template, where: str = "template") -> Template:
    n = len(p.fields)
    if n > MAX_ARITY:
        raise InvalidArgument(f"{where}: {n} fields, at most {MAX_ARITY}")
    return Template(
        tuple(field_pattern_from_pb(f, f"{where}.fields[{i}]") for i, f in enumerate(p.fields))
    )


def address_to_pb(a: AddressPattern, out: pb.AddressPattern | None = None) -> pb.AddressPattern:
    p = pb.AddressPattern() if out is None else out
    if a.kind == "all":
        p.all.SetInParent()
    else:
        setattr(p, a.kind, a.text)
    return p


def address_from_pb(p: pb.AddressPattern, where: str = "address") -> AddressPattern:
    """An address pattern; one with no kind set means every address, as an
    unset one does."""
    kind = p.WhichOneof("kind")
    if kind is None or kind == "all":
        return ALL
    with located(f"{where}.{kind}"):
        return AddressPattern(kind, getattr(p, kind))


def pattern_to_pb(pt: Pattern, out: pb.Pattern | None = None) -> pb.Pattern:
    """``pt`` as a protobuf; the all address pattern is left unset."""
    p = pb.Pattern() if out is None else out
    if pt.address.kind != "all":
        address_to_pb(pt.address, p.address)
    for t in pt.templates:
        template_to_pb(t, p.templates.add())
    if pt.filter:
        p.filter = pt.filter
    return p


def pattern_from_pb(p: pb.Pattern, where: str = "pattern") -> Pattern:
    """A Pattern; InvalidArgument with the path of the first bad part."""
    address = address_from_pb(p.address, f"{where}.address") if p.HasField("address") else ALL
    templates = tuple(
        template_from_pb(t, f"{where}.templates[{i}]") for i, t in enumerate(p.templates)
    )
    try:
        return Pattern(address, templates, p.filter)
    except InvalidArgument as e:
        # Pattern names its own parts "pattern.…": say where this one is.
        text = str(e)
        if where == "pattern" or not text.startswith("pattern."):
            raise
        raise InvalidArgument(where + text[len("pattern") :]) from None
