"""Stories of patterns as protobufs (``msgboard.codec``): round trips that
keep types, the all address sent unset, and a malformed pattern off the wire
refused with the path of its bad part."""

from __future__ import annotations

import pytest

from msgboard import codec
from msgboard.associative import (
    ALL,
    ANY,
    AddressPattern,
    Pattern,
    Prefix,
    Range,
    template,
)
from msgboard.errors import InvalidArgument
from msgboard.v1 import board_pb2 as pb
from tests.test_associative import NAN

# ---------------------------------------------------------------- protobuf


ROUND_TRIP_PATTERNS = [
    Pattern(),
    Pattern(AddressPattern.eq("a.b")),
    Pattern(AddressPattern.topic("rec.#"), (template(),)),
    Pattern(AddressPattern.prefix("x")),
    Pattern(
        templates=(
            template("job", int, float, str, bytes, bool, type(None), ANY),
            template(Range(1, 2.5), Range("a", "b"), Prefix("p"), Prefix(b"\x00")),
            template(None, True, -(2**63), NAN, -0.0, b"", ""),
        )
    ),
]


@pytest.mark.parametrize("pattern", ROUND_TRIP_PATTERNS)
def test_patterns_round_trip_through_protobuf(pattern: Pattern) -> None:
    """Given a pattern, when converted to protobuf bytes and back, expect the
    same pattern, types preserved (1 stays int, 2.5 float)."""
    wire = codec.pattern_to_pb(pattern).SerializeToString()
    back = codec.pattern_from_pb(pb.Pattern.FromString(wire))
    assert back == pattern
    for t, u in zip(back.templates, pattern.templates, strict=True):
        for f, g in zip(t.fields, u.fields, strict=True):
            if isinstance(f, Range) and isinstance(g, Range):
                assert (type(f.lo), type(f.hi)) == (type(g.lo), type(g.hi))


def test_all_is_sent_as_an_unset_address() -> None:
    """Given the all address, expect no address on the wire; given an empty
    AddressPattern message, expect all, as the proto says unset means."""
    assert not codec.pattern_to_pb(Pattern()).HasField("address")
    p = pb.Pattern()
    p.address.SetInParent()
    assert codec.pattern_from_pb(p).address == ALL
    assert codec.address_from_pb(codec.address_to_pb(ALL)) == ALL


def _bad(build: str) -> pb.Pattern:
    p = pb.Pattern()
    t = p.templates.add()
    if build == "unset kind":
        t.fields.add().any.SetInParent()
        t.fields.add()
    elif build == "unset value":
        t.fields.add().actual.SetInParent()
    elif build == "formal unspecified":
        t.fields.add().formal = pb.VALUE_TYPE_UNSPECIFIED
    elif build == "formal unknown":
        t.fields.add().formal = 99  # type: ignore[assignment]
    elif build == "range missing hi":
        t.fields.add().range.lo.int = 1
    elif build == "range reversed":
        r = t.fields.add().range
        r.lo.int, r.hi.int = 5, 1
    elif build == "range bool":
        r = t.fields.add().range
        r.lo.bool, r.hi.int = True, 1
    elif build == "prefix int":
        t.fields.add().prefix.int = 1
    elif build == "arity":
        for _ in range(65):
            t.fields.add().any.SetInParent()
    elif build == "topic":
        p.address.topic = "a.b*"
    elif build == "filter":
        p.filter = "priority > 'x'"
    return p


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ("unset kind", r"^pattern\.templates\[0\]\.fields\[1\]: no kind set"),
        ("unset value", r"^pattern\.templates\[0\]\.fields\[0\]\.actual: no kind set"),
        ("formal unspecified", r"^pattern\.templates\[0\]\.fields\[0\]\.formal: 0 is not"),
        ("formal unknown", r"^pattern\.templates\[0\]\.fields\[0\]\.formal: 99 is not"),
        ("range missing hi", r"^pattern\.templates\[0\]\.fields\[0\]\.range: lo and hi"),
        ("range reversed", r"^pattern\.templates\[0\]\.fields\[0\]: range lo 5 is greater"),
        ("range bool", r"^pattern\.templates\[0\]\.fields\[0\]: range bounds must be"),
        ("prefix int", r"^pattern\.templates\[0\]\.fields\[0\]: prefix must be str or bytes"),
        ("arity", r"^pattern\.templates\[0\]: 65 fields, at most 64"),
        ("topic", r"^pattern\.address\.topic: topic word 'b\*' mixes"),
        ("filter", r"^pattern\.filter: a number cannot be compared with a string at column 10"),
    ],
)
def test_bad_protobuf_patterns_name_the_path(build: str, message: str) -> None:
    """Given a malformed pattern off the wire, expect InvalidArgument whose
    message starts with the path of the bad part."""
    with pytest.raises(InvalidArgument, match=message):
        codec.pattern_from_pb(_bad(build))
