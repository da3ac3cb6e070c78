"""Properties of associative matching at random: template matching agrees
with a reference written apart from it, and topic matching with a regex."""

from __future__ import annotations

import math
import re
from fractions import Fraction

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from msgboard import codec
from msgboard.associative import (
    ANY,
    Actual,
    AddressPattern,
    AnyField,
    FieldPattern,
    Formal,
    Prefix,
    Range,
    Template,
    ValueType,
    type_of,
)
from msgboard.message import Fields, Value
from tests.test_associative import INF, NAN

# ---------------------------------------------------------------- properties

# A small pool, so that random templates and tuples often meet.
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([-(2**63), 2**63 - 1, 2**53 + 1]),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, -1.5, NAN, INF, -INF, float(2**53)]),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
    st.text(alphabet="ab", max_size=3),
    st.binary(max_size=2),
)
numbers = st.one_of(
    st.integers(-4, 4),
    st.sampled_from([2**53 + 1, -(2**63)]),
    st.floats(min_value=-4, max_value=4, width=16),
)


@st.composite
def field_patterns(draw: st.DrawFn) -> FieldPattern:
    kind = draw(st.sampled_from(["actual", "formal", "any", "nrange", "srange", "prefix"]))
    if kind == "actual":
        return Actual(draw(values))
    if kind == "formal":
        return Formal(draw(st.sampled_from(list(ValueType))))
    if kind == "any":
        return ANY
    if kind == "nrange":
        a, b = draw(numbers), draw(numbers)
        return Range(a, b) if a <= b else Range(b, a)
    if kind == "srange":
        s, t = draw(st.text(alphabet="abc", max_size=2)), draw(st.text(alphabet="abc", max_size=2))
        return Range(min(s, t), max(s, t))
    return Prefix(draw(st.one_of(st.text(alphabet="ab", max_size=2), st.binary(max_size=1))))


def reference_field(p: FieldPattern, v: Value) -> bool:
    """Matching as the proto's comments state it, written out longhand."""
    is_bool = isinstance(v, bool)
    is_int = isinstance(v, int) and not is_bool
    if isinstance(p, AnyField):
        return True
    if isinstance(p, Formal):
        return {
            ValueType.NULL: v is None,
            ValueType.BOOL: is_bool,
            ValueType.INT: is_int,
            ValueType.FLOAT: isinstance(v, float),
            ValueType.STRING: isinstance(v, str),
            ValueType.BYTES: isinstance(v, bytes),
        }[p.type]
    if isinstance(p, Actual):
        a = p.value
        if a is None or v is None:
            return a is None and v is None
        if isinstance(a, bool) or is_bool:
            return isinstance(a, bool) and is_bool and a == v
        if isinstance(a, float) and isinstance(v, float):
            return (math.isnan(a) and math.isnan(v)) or a == v
        if isinstance(a, int) and is_int:
            return a == v
        if isinstance(a, str) and isinstance(v, str):
            return a == v
        return isinstance(a, bytes) and isinstance(v, bytes) and a == v
    if isinstance(p, Range):
        if isinstance(p.lo, str):
            return isinstance(v, str) and isinstance(p.hi, str) and p.lo <= v <= p.hi
        if not (is_int or isinstance(v, float)) or math.isnan(v):  # type: ignore[arg-type]
            return False
        assert isinstance(v, int | float)
        if math.isinf(v):
            return False  # the generated numeric bounds are finite
        return Fraction(p.lo) <= Fraction(v) <= Fraction(p.hi)
    if isinstance(p.p, str):
        return isinstance(v, str) and v[: len(p.p)] == p.p
    return isinstance(v, bytes) and v[: len(p.p)] == p.p


def reference_template(t: Template, fields: Fields) -> bool:
    return len(t.fields) == len(fields) and all(
        reference_field(p, v) for p, v in zip(t.fields, fields, strict=False)
    )


@st.composite
def templates_and_tuples(draw: st.DrawFn) -> tuple[Template, Fields]:
    fields = tuple(draw(st.lists(values, max_size=4)))
    if draw(st.booleans()):
        # A template built around the tuple, so matches are common.
        pats: list[FieldPattern] = []
        for v in fields:
            fitting: list[FieldPattern] = [Actual(v), Formal(type_of(v)), ANY]
            if isinstance(v, str | bytes):
                fitting.append(Prefix(v[:1]))
            # Mostly a pattern that fits, sometimes a random one.
            random_one = draw(st.integers(0, 3)) == 0
            pats.append(draw(field_patterns() if random_one else st.sampled_from(fitting)))
        if draw(st.integers(0, 9)) == 0:
            pats.append(ANY)  # now and then, an arity mismatch
        return Template(tuple(pats)), fields
    return Template(tuple(draw(st.lists(field_patterns(), max_size=4)))), fields


@settings(max_examples=600, database=None, deadline=None)
@given(templates_and_tuples())
def test_template_matches_agrees_with_the_reference(case: tuple[Template, Fields]) -> None:
    """Given random templates and tuples, expect Template.matches to agree
    with a longhand reference, and the template to survive protobuf."""
    t, fields = case
    assert t.matches(fields) is reference_template(t, fields)
    assert codec.template_from_pb(codec.template_to_pb(t)) == t


def reference_topic(pattern: list[str], words: list[str]) -> bool:
    """A regex over words each ended by '/': '*' is one word, '#' any run."""
    parts = {"*": "[^/]*/", "#": "(?:[^/]*/)*"}
    rx = "".join(parts.get(w, re.escape(w) + "/") for w in pattern)
    return re.fullmatch(rx, "".join(w + "/" for w in words)) is not None


@settings(max_examples=1000, database=None, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "", "*", "#"]), max_size=6),
    st.lists(st.sampled_from(["a", "b", ""]), max_size=6),
)
def test_topic_matching_agrees_with_a_regex(pattern: list[str], words: list[str]) -> None:
    """Given random short topic patterns and addresses, expect the compiled
    matcher to agree with a regex reference."""
    # [""] and [] join to the same string; this notation reads it as [].
    assume(pattern != [""] and words != [""])
    got = AddressPattern.topic(".".join(pattern)).matches(".".join(words))
    assert got is reference_topic(pattern, words)
