"""Stories of associative matching: typed values, templates, address patterns,
patterns, the CLI notation and the protobuf form of patterns."""

from __future__ import annotations

import json
import math
import re
import time
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from msgboard import codec
from msgboard.associative import (
    ALL,
    ANY,
    EVERYTHING,
    Actual,
    AddressPattern,
    AnyField,
    FieldPattern,
    Formal,
    Pattern,
    Prefix,
    Range,
    Template,
    ValueType,
    check_fields,
    fields_to_json,
    parse_address,
    parse_template,
    parse_tuple,
    same_value,
    template,
    type_of,
)
from msgboard.errors import InvalidArgument
from msgboard.message import Fields, Message, Value
from msgboard.v1 import board_pb2 as pb

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


# ---------------------------------------------------------------- notation


def test_notation_reads_formals_patterns_and_actuals() -> None:
    """Given a decoded JSON template using every form, expect the matching
    patterns; JSON 1 stays int and 1.0 stays float."""
    obj = json.loads(
        '["?", "?int", "?float", "?str", "?bytes", "?bool", "?null",'
        ' {"range": [1, 2.5]}, {"range": ["a", "c"]}, {"prefix": "jo"},'
        ' {"prefix": {"bytes": "AAE="}}, {"bytes": "AAE="}, {"value": "?int"},'
        ' 1, 1.0, true, null, "job"]'
    )
    assert parse_template(obj).fields == (
        ANY,
        Formal(ValueType.INT),
        Formal(ValueType.FLOAT),
        Formal(ValueType.STRING),
        Formal(ValueType.BYTES),
        Formal(ValueType.BOOL),
        Formal(ValueType.NULL),
        Range(1, 2.5),
        Range("a", "c"),
        Prefix("jo"),
        Prefix(b"\x00\x01"),
        Actual(b"\x00\x01"),
        Actual("?int"),
        Actual(1),
        Actual(1.0),
        Actual(True),
        Actual(None),
        Actual("job"),
    )
    assert type(parse_template([1.0]).fields[0].value) is float  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"a": 1}, r"^template: expected a JSON array, got object"),
        (["?integer"], r"^template\[0\]: unknown formal '\?integer'"),
        ([1, [2]], r"^template\[1\]: list is not a tuple type"),
        ([{"range": [3, 1]}], r"^template\[0\]: range lo 3 is greater than hi 1"),
        ([{"range": [1]}], r"^template\[0\]: range must be an array \[lo, hi\]"),
        ([{"range": [True, 2]}], r"^template\[0\]: range bounds must be both"),
        ([{"prefix": 5}], r"^template\[0\]: prefix must be str or bytes"),
        ([{"bytes": "!!"}], r"^template\[0\]: '!!' is not valid base64"),
        ([{"value": [1]}], r"^template\[0\]: value must be a JSON scalar"),
        ([{"regex": "x"}], r"^template\[0\]: unknown key 'regex'"),
        ([{"a": 1, "b": 2}], r"^template\[0\]: an object must have exactly one key"),
        ([2**64], r"^template\[0\]: integer .* 64 bits"),
        ([0] * 65, r"^template: 65 fields, at most 64"),
    ],
)
def test_notation_errors_name_the_position(obj: object, message: str) -> None:
    """Given a malformed template, expect InvalidArgument naming where."""
    with pytest.raises(InvalidArgument, match=message):
        parse_template(obj)


def test_notation_tuples_hold_values_only() -> None:
    """Given a tuple with escapes, expect the values; given pattern syntax in
    a tuple, expect InvalidArgument pointing at the escape."""
    assert parse_tuple(
        json.loads('["job", 1, 1.0, false, null, {"bytes": "aGk="}, {"value": "?x"}]')
    ) == ("job", 1, 1.0, False, None, b"hi", "?x")
    with pytest.raises(InvalidArgument, match=r"^tuple\[0\]: '\?int' is a pattern.*\"value\""):
        parse_tuple(["?int"])
    with pytest.raises(InvalidArgument, match=r"^tuple\[1\]: range is a pattern"):
        parse_tuple([1, {"range": [1, 2]}])
    with pytest.raises(InvalidArgument, match=r"^tuple\[0\]: dict is not|unknown key 'x'"):
        parse_tuple([{"x": 1}])
    with pytest.raises(InvalidArgument, match=r"^tuple: expected a JSON array, got string"):
        parse_tuple("job")


def test_fields_to_json_reads_back_unchanged() -> None:
    """Given a tuple with bytes and a string starting with '?', expect JSON
    that parse_tuple reads back to the same tuple, and that as a template
    matches that tuple."""
    fields: Fields = ("?x", b"\xff\x00", 1, 1.0, True, None, "plain")
    obj = json.loads(json.dumps(fields_to_json(fields)))
    assert obj[0] == {"value": "?x"} and obj[1] == {"bytes": "/wA="}
    assert parse_tuple(obj) == fields
    assert parse_template(obj).matches(fields)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all", ALL),
        ("eq:all", AddressPattern.eq("all")),
        ("eq:a.b", AddressPattern.eq("a.b")),
        ("topic:rec.pets.*", AddressPattern.topic("rec.pets.*")),
        ("prefix:rec.", AddressPattern.prefix("rec.")),
        ("rec.pets", AddressPattern.eq("rec.pets")),
        ("urn:x:y", AddressPattern.eq("urn:x:y")),
        ("", AddressPattern.eq("")),
    ],
)
def test_parse_address(text: str, expected: AddressPattern) -> None:
    """Given each address notation, expect its pattern; a bare name is eq,
    and str() of a pattern reads back as the same pattern."""
    assert parse_address(text) == expected
    assert parse_address(str(expected)) == expected


def test_parse_address_errors_name_where() -> None:
    """Given a bad topic, expect InvalidArgument prefixed with where."""
    with pytest.raises(InvalidArgument, match=r"^--address: topic word 'a\*' mixes"):
        parse_address("topic:a*.b", where="--address")


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
