"""Stories of the CLI notation of tuples, templates and address patterns
(``msgboard.associative.notation``): every form read, errors naming the
position, and JSON that reads back unchanged."""

from __future__ import annotations

import json

import pytest

from msgboard.associative import (
    ALL,
    ANY,
    Actual,
    AddressPattern,
    Formal,
    Prefix,
    Range,
    ValueType,
    fields_to_json,
    parse_address,
    parse_template,
    parse_tuple,
    template_to_json,
)
from msgboard.errors import InvalidArgument
from msgboard.message import Fields

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


def test_template_to_json_reads_back_unchanged() -> None:
    """Given a template using every kind of field pattern, expect JSON that
    parse_template reads back to an equal template (a selector's pattern
    shown in the console reads as the CLI takes it)."""
    text = (
        '["?", "?int", "?null", {"range": [1, 2.5]}, {"range": ["a", "c"]},'
        ' {"prefix": "jo"}, {"prefix": {"bytes": "AAE="}}, {"bytes": "/wA="},'
        ' {"value": "?int"}, 1, 1.0, true, null, "job"]'
    )
    t = parse_template(json.loads(text))
    shown = json.loads(json.dumps(template_to_json(t)))
    assert shown == json.loads(text)
    assert parse_template(shown) == t
    # 1 and 1.0 stay apart through the round trip.
    assert [type(x) for x in shown[9:11]] == [int, float]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all", ALL),
        ("eq:all", AddressPattern.eq("all")),
        ("eq:a.b", AddressPattern.eq("a.b")),
        ("topic:rec.pets.*", AddressPattern.topic("rec.pets.*")),
        ("prefix:rec.", AddressPattern.prefix("rec.")),
        ("rec.pets", AddressPattern.eq("rec.pets")),
        ("eq:urn:x:y", AddressPattern.eq("urn:x:y")),
        ("a.b:c", AddressPattern.eq("a.b:c")),
        ("", AddressPattern.eq("")),
    ],
)
def test_parse_address(text: str, expected: AddressPattern) -> None:
    """Given each address notation, expect its pattern; a bare name is eq,
    and str() of a pattern reads back as the same pattern."""
    assert parse_address(text) == expected
    assert parse_address(str(expected)) == expected


@pytest.mark.parametrize("text", ["regex:img.*", "glob:a*", "urn:x:y"])
def test_an_unknown_kind_is_an_error_not_an_exact_address(text: str) -> None:
    """Given `regex:img.*` (a pattern language the board does not have), I
    expect an error naming the kinds and the eq: form, not a literal
    address that silently matches nothing (issue 35 item 9)."""
    with pytest.raises(InvalidArgument, match=r"^--address: .* is not a kind of address pattern"):
        parse_address(text, where="--address")
    assert parse_address(f"eq:{text}") == AddressPattern.eq(text)


def test_parse_address_errors_name_where() -> None:
    """Given a bad topic, expect InvalidArgument prefixed with where."""
    with pytest.raises(InvalidArgument, match=r"^--address: topic word 'a\*' mixes"):
        parse_address("topic:a*.b", where="--address")
