"""Stories of associative matching: typed values, field patterns,
templates, address patterns and patterns. The CLI notation is
test_notation.py, the protobuf form of patterns test_codec.py, and the
properties checked against reference models test_associative_properties.py."""

from __future__ import annotations

import time

import pytest

from msgboard.associative import (
    ALL,
    ANY,
    EVERYTHING,
    Actual,
    AddressPattern,
    AnyField,
    Formal,
    Pattern,
    Prefix,
    Range,
    Template,
    ValueType,
    check_fields,
    same_value,
    template,
    type_of,
)
from msgboard.errors import InvalidArgument
from msgboard.message import Message, Value

NAN = float("nan")
INF = float("inf")


# ---------------------------------------------------------------- typed values


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (1, 1, True),
        (1, 1.0, False),
        (1, True, False),
        (0, False, False),
        (True, True, True),
        (True, False, False),
        (None, None, True),
        (None, 0, False),
        (None, "", False),
        (NAN, float("nan"), True),
        (NAN, 1.0, False),
        (-0.0, 0.0, True),
        ("a", b"a", False),
        (b"a", b"a", True),
    ],
)
def test_typed_equality(a: Value, b: Value, same: bool) -> None:
    """Given two field values, when compared, expect equality only for the
    same type and value: True is not 1, 1 is not 1.0, null is only null and
    every NaN is the one NaN."""
    assert same_value(a, b) is same
    assert same_value(b, a) is same


def test_type_of_names_each_type_and_refuses_others() -> None:
    """Given a value of each field type, expect its ValueType; given a list,
    expect InvalidArgument."""
    assert [type_of(v) for v in (None, True, 1, 1.0, "s", b"b")] == list(ValueType)
    with pytest.raises(InvalidArgument, match="list is not a tuple type"):
        type_of([1])


def test_check_fields_returns_a_tuple_and_names_the_bad_position() -> None:
    """Given a list of valid values, expect a tuple; given a bad field, expect
    InvalidArgument naming its position."""
    assert check_fields([None, True, 1, 1.5, "s", b"b"]) == (None, True, 1, 1.5, "s", b"b")
    with pytest.raises(InvalidArgument, match=r"^tuple\[2\]: list is not a tuple type"):
        check_fields((1, 2, [3]))
    with pytest.raises(InvalidArgument, match=r"tuple\[0\]: integer .* 64 bits"):
        check_fields([2**63])
    assert check_fields([-(2**63), 2**63 - 1]) == (-(2**63), 2**63 - 1)
    with pytest.raises(InvalidArgument, match="65 fields, at most 64"):
        check_fields([0] * 65)
    with pytest.raises(InvalidArgument, match="at most 2"):
        check_fields([0] * 3, max_arity=2)
    with pytest.raises(InvalidArgument, match=r"^msg\.tuple: str is not a tuple or list"):
        check_fields("abc", where="msg.tuple")


# ---------------------------------------------------------------- field patterns


def test_actual_matches_the_typed_value_only() -> None:
    """Given Actual(1), expect it to match 1 but not 1.0 nor True; Actual(None)
    matches only null; Actual(NaN) matches NaN; Actual(0.0) matches -0.0."""
    assert Actual(1).matches(1)
    assert not Actual(1).matches(1.0)
    assert not Actual(1).matches(True)
    assert not Actual(True).matches(1)
    assert Actual(None).matches(None)
    assert not Actual(None).matches(0)
    assert Actual(NAN).matches(float("nan"))
    assert not Actual(NAN).matches(1.0)
    assert Actual(0.0).matches(-0.0)
    assert not Actual("a").matches(b"a")


def test_actuals_compare_and_hash_by_typed_value() -> None:
    """Given actuals of 1, 1.0 and True, expect three distinct keys; two NaN
    actuals are one key."""
    assert len({Actual(1), Actual(1.0), Actual(True)}) == 3
    assert Actual(NAN) == Actual(float("nan"))
    assert len({Actual(NAN), Actual(float("nan"))}) == 1


def test_actual_refuses_values_that_are_not_fields() -> None:
    """Given a list or an oversized int, expect InvalidArgument."""
    with pytest.raises(InvalidArgument, match="list is not a tuple type"):
        Actual([1])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="64 bits"):
        Actual(-(2**63) - 1)


@pytest.mark.parametrize("vt", list(ValueType))
def test_formal_matches_any_value_of_its_type_only(vt: ValueType) -> None:
    """Given a formal of each type, when offered one value of every type,
    expect a match for exactly the value of its type (bool is not int)."""
    samples = {
        ValueType.NULL: None,
        ValueType.BOOL: False,
        ValueType.INT: 0,
        ValueType.FLOAT: 0.0,
        ValueType.STRING: "",
        ValueType.BYTES: b"",
    }
    f = Formal(vt)
    assert [t for t, v in samples.items() if f.matches(v)] == [vt]


def test_formal_refuses_a_non_type() -> None:
    """Given Formal(int) (a Python class, not a ValueType), expect InvalidArgument."""
    with pytest.raises(InvalidArgument, match="not a ValueType"):
        Formal(int)  # type: ignore[arg-type]


def test_any_matches_everything_including_null() -> None:
    """Given ANY, expect it to match a value of every type, null included."""
    assert all(ANY.matches(v) for v in (None, True, 0, NAN, "", b""))
    assert AnyField() == ANY
    assert repr(ANY) == "ANY"


def test_numeric_range_matches_ints_and_floats_inclusively() -> None:
    """Given Range(1, 10), expect both ends and ints and floats between to
    match; outside values, bools, strings and NaN do not."""
    r = Range(1, 10)
    assert all(r.matches(v) for v in (1, 10, 5, 1.0, 9.5, 10.0))
    assert not any(r.matches(v) for v in (0, 11, 0.999, 10.001, True, "5", None, NAN))
    mixed = Range(0.5, 2)
    assert mixed.matches(2) and mixed.matches(0.5) and not mixed.matches(0)
    assert Range(-INF, INF).matches(INF) and not Range(-INF, INF).matches(NAN)


def test_numeric_range_compares_large_ints_exactly() -> None:
    """Given a range on 2**53 + 1 exactly, expect the int to match and the
    nearest float (2**53, which rounds) not to: no rounding through floats."""
    r = Range(2**53 + 1, 2**53 + 1)
    assert r.matches(2**53 + 1)
    assert not r.matches(float(2**53))


def test_string_range_matches_strings_in_codepoint_order() -> None:
    """Given Range("b", "d"), expect "b", "c", "cz", "d" to match; "a", "da",
    bytes and numbers do not."""
    r = Range("b", "d")
    assert all(r.matches(v) for v in ("b", "c", "cz", "d"))
    assert not any(r.matches(v) for v in ("a", "da", b"c", 3, None))
    assert Range("Z", "a").matches("_")  # '_' sits between 'Z' and 'a'


@pytest.mark.parametrize(
    ("lo", "hi", "message"),
    [
        (10, 1, "lo 10 is greater than hi 1"),
        ("b", "a", "greater than"),
        (True, 5, "both numbers or both strings"),
        (0, True, "both numbers or both strings"),
        (1, "z", "both numbers or both strings"),
        (None, 1, "both numbers or both strings"),
        (b"a", b"b", "both numbers or both strings"),
        (NAN, 1, "lo is NaN"),
        (0, 2**63, "hi 9223372036854775808 does not fit"),
    ],
)
def test_bad_ranges_are_refused(lo: object, hi: object, message: str) -> None:
    """Given reversed, mixed, boolean, NaN or oversized bounds, expect
    InvalidArgument saying which."""
    with pytest.raises(InvalidArgument, match=message):
        Range(lo, hi)  # type: ignore[arg-type]


def test_prefix_matches_strings_or_bytes_of_its_own_type() -> None:
    """Given a str prefix, expect str fields starting with it to match and
    bytes not; the other way round for a bytes prefix; "" matches every str."""
    assert Prefix("jo").matches("job") and Prefix("jo").matches("jo")
    assert not Prefix("jo").matches("j") and not Prefix("jo").matches(b"job")
    assert Prefix(b"\x00").matches(b"\x00\x01") and not Prefix(b"\x00").matches("\x00")
    assert Prefix("").matches("") and not Prefix("").matches(None)
    with pytest.raises(InvalidArgument, match="prefix must be str or bytes"):
        Prefix(1)  # type: ignore[arg-type]


# ---------------------------------------------------------------- templates


def test_template_of_turns_plain_python_into_patterns() -> None:
    """Given plain Python classes, patterns and values, expect formals for the
    classes, the patterns unchanged and actuals for the rest."""
    t = template("job", int, float, str, bytes, bool, type(None), ANY, Range(1, 10), None)
    assert t.fields == (
        Actual("job"),
        Formal(ValueType.INT),
        Formal(ValueType.FLOAT),
        Formal(ValueType.STRING),
        Formal(ValueType.BYTES),
        Formal(ValueType.BOOL),
        Formal(ValueType.NULL),
        ANY,
        Range(1, 10),
        Actual(None),
    )
    assert Template.of(ValueType.INT) == Template((Formal(ValueType.INT),))


def test_template_matches_field_by_field() -> None:
    """Given template("job", int, ANY, Range(1, 10)), expect tuples whose every
    field fits to match, and any one misfit to spoil it."""
    t = template("job", int, ANY, Range(1, 10))
    assert t.matches(("job", 7, None, 3))
    assert t.matches(("job", -1, b"x", 9.5))
    assert not t.matches(("jobs", 7, None, 3))
    assert not t.matches(("job", True, None, 3))
    assert not t.matches(("job", 7, None, 11))


def test_arity_must_be_equal() -> None:
    """Given a template of two fields, expect tuples of one or three fields
    not to match, even if the template is all ANY."""
    t = template(ANY, ANY)
    assert t.matches((1, 2))
    assert not t.matches((1,))
    assert not t.matches((1, 2, 3))


def test_the_empty_template_matches_only_the_empty_tuple() -> None:
    """Given a template with no fields, expect it to match () only."""
    assert template().matches(())
    assert not template().matches((None,))


def test_bad_templates_are_refused_with_the_position() -> None:
    """Given a list value, a non-tuple class, 65 fields or raw values in the
    constructor, expect InvalidArgument naming where."""
    with pytest.raises(InvalidArgument, match=r"^template\[1\]: list is not a tuple type"):
        template("a", [1])
    with pytest.raises(InvalidArgument, match=r"^template\[0\]: dict is not a tuple type"):
        template(dict)
    with pytest.raises(InvalidArgument, match="65 fields, at most 64"):
        template(*[ANY] * 65)
    assert len(template(*[ANY] * 64).fields) == 64
    with pytest.raises(InvalidArgument, match=r"template\[0\]: int is not a field pattern"):
        Template((1,))  # type: ignore[arg-type]


# ---------------------------------------------------------------- address patterns


@pytest.mark.parametrize(
    ("topic", "address", "matches"),
    [
        ("a.b", "a.b", True),
        ("a.b", "a.c", False),
        ("a.*", "a.b", True),
        ("a.*", "a", False),
        ("a.*", "a.b.c", False),
        ("*.b", "a.b", True),
        ("*", "a", True),
        ("*", "", False),
        ("*", "a.b", False),
        ("*.*", "a.b", True),
        ("a.#", "a", True),
        ("a.#", "a.b", True),
        ("a.#", "a.b.c", True),
        ("a.#", "b.a", False),
        ("#.a", "a", True),
        ("#.a", "x.y.a", True),
        ("#.a", "a.x", False),
        ("#", "", True),
        ("#", "a", True),
        ("#", "a.b.c", True),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("a.#.b", "a.x.y", False),
        ("#.*", "", False),
        ("#.*", "a", True),
        ("*.#", "a.b.c", True),
        ("#.#", "", True),
        ("a.#.#.b", "a.b", True),
        ("rec.pets.*", "rec.pets.cats", True),
        ("rec.pets.*", "rec.pets", False),
        # Empty words are words: "a." is "a" then "".
        ("a.*", "a.", True),
        ("*.*.*", "a..b", True),
        ("a..b", "a..b", True),
        ("", "", True),
        ("", "a", False),
    ],
)
def test_topic_rules(topic: str, address: str, matches: bool) -> None:
    """Given an AMQP topic pattern, when matched against an address, expect
    '*' to take exactly one word and '#' zero or more."""
    assert AddressPattern.topic(topic).matches(address) is matches


def test_topic_words_must_be_whole_wildcards() -> None:
    """Given a word mixing a wildcard with other characters, expect
    InvalidArgument; in eq and prefix patterns '*' and '#' are plain text."""
    for bad in ("a*b", "a.b#", "**", "#.x#"):
        with pytest.raises(InvalidArgument, match="mixes a wildcard"):
            AddressPattern.topic(bad)
    assert AddressPattern.eq("a*b").matches("a*b")
    assert AddressPattern.prefix("a#").matches("a#b")


def test_topic_matching_stays_linear_on_hostile_patterns() -> None:
    """Given a pattern of many '#' and a long address that fails at its end,
    expect the answer fast (a backtracking regex would take ages)."""
    long_address = ".".join(["a"] * 500) + ".y"
    hostile = AddressPattern.topic(".".join(["#", "a"] * 100) + ".x")
    collapsed = AddressPattern.topic("#.#.#.#.#.#.#.x")
    start = time.perf_counter()
    assert not hostile.matches(long_address)
    assert not collapsed.matches(long_address)
    assert collapsed.matches(long_address + ".x")
    assert time.perf_counter() - start < 1.0


def test_eq_prefix_and_all() -> None:
    """Given eq, prefix and all patterns, expect exact, leading-text and
    every-address matches respectively."""
    assert AddressPattern.eq("a.b").matches("a.b")
    assert not AddressPattern.eq("a.b").matches("a.b.c")
    assert AddressPattern.eq("").matches("") and not AddressPattern.eq("").matches("x")
    assert AddressPattern.prefix("rec.").matches("rec.pets")
    assert not AddressPattern.prefix("rec.").matches("rec")
    assert ALL.matches("") and ALL.matches("anything")
    assert ALL.matches_all and AddressPattern.prefix("").matches_all
    assert AddressPattern.topic("#").matches_all
    assert not AddressPattern.topic("a.#").matches_all


def test_bad_address_patterns_are_refused() -> None:
    """Given an unknown kind, text on all, or text over 1024 bytes, expect
    InvalidArgument; exactly 1024 bytes is fine."""
    with pytest.raises(InvalidArgument, match="not one of"):
        AddressPattern("regex", "a.*")
    with pytest.raises(InvalidArgument, match="takes no text"):
        AddressPattern("all", "x")
    with pytest.raises(InvalidArgument, match="over 1024 bytes"):
        AddressPattern.eq("é" * 513)
    assert AddressPattern.prefix("x" * 1024).matches("x" * 1025)


# ---------------------------------------------------------------- patterns


def test_pattern_is_address_and_any_one_template() -> None:
    """Given a pattern with a topic and two alternative templates, expect a
    message to match when its address matches AND either template does."""
    p = Pattern(
        AddressPattern.topic("jobs.#"),
        (template("resize", int), template("crop", int, int)),
    )
    assert p.matches(Message(tuple=("resize", 3), address="jobs.img"))
    assert p.matches(Message(tuple=("crop", 1, 2), address="jobs"))
    assert not p.matches(Message(tuple=("crop", 1), address="jobs"))
    assert not p.matches(Message(tuple=("resize", 3), address="mail"))
    assert p.matches_parts("jobs.x", ("resize", 1))


def test_pattern_without_templates_matches_every_tuple() -> None:
    """Given no templates, expect every tuple to match, the empty one too;
    given the empty template, only messages without a tuple."""
    assert EVERYTHING.matches_all
    assert Pattern().matches(Message()) and Pattern().matches(Message(tuple=(1,)))
    only_empty = Pattern(templates=(template(),))
    assert only_empty.matches(Message()) and not only_empty.matches(Message(tuple=(1,)))


def test_pattern_runs_its_filter_after_address_and_templates() -> None:
    """Given a pattern with an address, a template and a filter, expect a
    message to match only when all three do; matches_parts leaves the filter
    to filter_matches, and equal texts make equal, hashable patterns."""
    p = Pattern(AddressPattern.topic("jobs.#"), (template("resize", int),), "t[1] > 2")
    assert not p.matches_all
    assert p.matches(Message(tuple=("resize", 3), address="jobs.img"))
    assert not p.matches(Message(tuple=("resize", 2), address="jobs.img"))
    assert not p.matches(Message(tuple=("resize", 3), address="mail"))
    assert not p.matches(Message(tuple=("crop", 3), address="jobs"))
    assert p.matches_parts("jobs.x", ("resize", 1))
    assert not p.filter_matches(Message(tuple=("resize", 1)))
    assert not Pattern(filter="priority > 3").matches_all
    assert Pattern(filter="priority > 3").matches(Message(priority=4))
    assert Pattern(filter="priority > 3") == Pattern(filter="priority > 3")
    assert len({Pattern(filter="priority > 3"), Pattern(filter="priority > 3")}) == 1


def test_pattern_refuses_bad_filters_and_wrong_parts() -> None:
    """Given a filter that does not compile, expect InvalidArgument naming
    pattern.filter and the column; given parts of the wrong type,
    InvalidArgument too."""
    with pytest.raises(
        InvalidArgument, match=r"^pattern\.filter: expected a value, found the end at column 11"
    ):
        Pattern(filter="priority >")
    with pytest.raises(InvalidArgument, match=r"^pattern\.filter: int is not a string"):
        Pattern(filter=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"pattern\.templates\[0\]"):
        Pattern(templates=(("a",),))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=r"pattern\.address"):
        Pattern("a.b")  # type: ignore[arg-type]
    assert Pattern(templates=[template(1)]).templates == (template(1),)  # type: ignore[arg-type]
