"""Hypothesis strategies for messages and patterns that often meet: small
pools of words, values and types, plus now and then a value or an address
long enough to be indexed by a digest."""

from __future__ import annotations

from hypothesis import strategies as st

from msgboard.associative import (
    ANY,
    Actual,
    AddressPattern,
    FieldPattern,
    Formal,
    Pattern,
    Prefix,
    Range,
    Template,
    ValueType,
)
from msgboard.associative.keys import ADDRESS_KEY_BYTES, VALUE_KEY_BYTES
from msgboard.message import Fields, Value

LONG = "L" * (VALUE_KEY_BYTES + 5)
values: st.SearchStrategy[Value] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 2),
    st.sampled_from([0.0, -0.0, 1.0, float("nan"), 2.5]),
    st.sampled_from(["", "a", "b", "ab", LONG, LONG + "x"]),
    st.sampled_from([b"", b"a", LONG.encode()]),
)
tuples: st.SearchStrategy[Fields] = st.lists(values, max_size=3).map(tuple)

_WORDS = ["a", "b", ""]
_LONG_ADDRESS = "x" * (ADDRESS_KEY_BYTES + 3)
addresses: st.SearchStrategy[str] = st.one_of(
    st.lists(st.sampled_from(_WORDS), max_size=3).map(".".join),
    st.sampled_from([_LONG_ADDRESS, _LONG_ADDRESS + ".a", _LONG_ADDRESS + "y"]),
)


@st.composite
def address_patterns(draw: st.DrawFn) -> AddressPattern:
    kind = draw(st.sampled_from(["all", "eq", "topic", "prefix"]))
    if kind == "all":
        return AddressPattern()
    if kind == "eq":
        return AddressPattern.eq(draw(addresses))
    if kind == "prefix":
        return AddressPattern.prefix(
            draw(st.sampled_from(["", "a", "a.", "b", _LONG_ADDRESS[:-1], _LONG_ADDRESS + "."]))
        )
    words = draw(st.lists(st.sampled_from([*_WORDS, "*", "#"]), max_size=4))
    if draw(st.integers(0, 5)) == 0:
        words = [_LONG_ADDRESS, *words]
    return AddressPattern.topic(".".join(words))


field_patterns: st.SearchStrategy[FieldPattern] = st.one_of(
    values.map(Actual),
    values.map(Actual),  # twice: actuals are what indexes key on
    st.sampled_from(list(ValueType)).map(Formal),
    st.just(ANY),
    st.sampled_from([Range(-1, 1.5), Range(0, 0), Range("a", "b")]),
    st.sampled_from(["", "a", b"", b"a"]).map(Prefix),
)


templates: st.SearchStrategy[Template] = st.lists(field_patterns, max_size=3).map(
    lambda fs: Template(tuple(fs))
)


@st.composite
def patterns(draw: st.DrawFn) -> Pattern:
    return Pattern(draw(address_patterns()), tuple(draw(st.lists(templates, max_size=3))))
