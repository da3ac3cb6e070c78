"""Stories of the filter language: JMS message selectors over a message's
envelope, headers and tuple, case by case, then bounds. The parser fuzzed
and checked against a reference evaluator is test_filter_fuzz.py; filters
end to end through a real server and the command line,
test_filter_end_to_end.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from msgboard.associative.filter import (
    FIELDS,
    MAX_DEPTH,
    MAX_FILTER_CHARS,
    compile_filter,
)
from msgboard.associative.like import MAX_LIKE_CHARS, compile_like
from msgboard.errors import InvalidArgument
from msgboard.message import Message

T, F, U = True, False, None

MSG = Message(
    tuple=("job", 7, 2.5, None, b"ab", True, float("nan")),
    address="rec.pets.cats",
    priority=5,
    headers={"color": "red", "content-type": "x", "priority": "high", "Size": "L"},
    reply_to="replies",
    queue="jobs",
    seq=42,
    posted_at=1_000,
    delivery_count=1,
)


def ev(text: str, msg: Message = MSG) -> bool | None:
    return compile_filter(text).evaluate(msg)


def cases(*rows: tuple[str, bool | None]) -> Any:
    return pytest.mark.parametrize(("text", "expected"), rows, ids=[r[0] for r in rows])


# ---------------------------------------------------------------- comparisons


@cases(
    ("priority = 5", T),
    ("priority <> 5", F),
    ("priority != 5", F),
    ("priority < 6", T),
    ("priority <= 5", T),
    ("priority > 5", F),
    ("priority >= 5", T),
    ("address = 'rec.pets.cats'", T),
    ("color = 'red'", T),
    ("color <> 'blue'", T),
    ("color < 's'", T),  # strings order by code point, as template ranges do
    ("'B' < 'a'", T),
    ("t[1] = 7.0", T),  # int and float compare numerically
    ("t[2] > 2", T),
    ("t[1] = 7.000001", F),
    ("9007199254740993 = 9007199254740992.0", F),  # exactly, with no rounding
    ("0 = 0", T),  # a lone zero is no leading zero
    ("007.5 = 7.5", T),  # a leading zero is refused in integers only (as in Java)
    ("0.5 > 0", T),
    ("00e1 = 0", T),
    ("TRUE = TRUE", T),
    ("TRUE <> FALSE", T),
    ("t[5] = TRUE", T),
    ("t[4] = t[4]", T),  # bytes compare with bytes
    ("t[6] = t[6]", T),  # every NaN is one value, as in tuples
    ("t[6] < 1", F),
    ("t[6] <> t[6]", F),
)
def test_comparisons(text: str, expected: bool | None) -> None:
    """Given each comparison operator on numbers, strings, booleans and bytes,
    expect the JMS result: numbers compare numerically, int with float."""
    assert ev(text) is expected


@cases(
    ("t[0] = 1", F),  # 'job' vs 1
    ("t[0] <> 1", F),  # JMS: any comparison of unlike types is FALSE
    ("NOT (t[0] = 1)", T),
    ("t[0] < 1", F),
    ("t[1] = 'job'", F),
    ("t[5] = 1", F),  # a bool is not a number
    ("t[5] > t[5]", F),  # booleans only = and <>
    ("t[4] = 'ab'", F),  # bytes never equal a string
    ("t[0] IN (1, 2)", F),
    ("t[0] NOT IN (1, 2)", F),
    ("t[1] LIKE '7'", F),
    ("t[1] NOT LIKE '7'", F),
    ("t[0] BETWEEN 1 AND 2", F),
    ("t[0] NOT BETWEEN 1 AND 2", F),
    ("t[0] + 1 IS NULL", T),  # arithmetic on a non-number is NULL
)
def test_unlike_types_at_run_time_compare_false(text: str, expected: bool | None) -> None:
    """Given tuple fields, whose types are known only at run time, compared
    with values of another type, expect FALSE (JMS), negated forms too."""
    assert ev(text) is expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("priority = 'high'", "a number cannot be compared with a string at column 10"),
        ("color > 3", "a number cannot be compared with a string at column 7"),
        ("TRUE < FALSE", "booleans compare only with = and <>, not < at column 6"),
        ("color + 1 = 2", "expected a number, found a string at column 1"),
        ("priority", "expected a condition, found a number at column 1"),
        ("priority AND TRUE", "expected a condition, found a number at column 1"),
        ("priority LIKE '5'", "LIKE needs a string, found a number at column 1"),
        ("color IN (1, 2)", "a number cannot be compared with a string at column 7"),
        ("t[0] BETWEEN 1 AND 'z'", "a number cannot be compared with a string at column 6"),
        # Found by the token-soup fuzz: three types in one BETWEEN.
        (
            "'' BETWEEN TRUE AND priority",
            "a condition cannot be compared with a number or a string at column 4",
        ),
    ],
)
def test_type_errors_known_at_compile_time_are_refused(text: str, message: str) -> None:
    """Given sides whose types are known (literals, message fields, headers,
    which are strings), expect a mismatch to be InvalidArgument with the
    column, not a filter that silently never matches."""
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        compile_filter(text)


# ---------------------------------------------------------------- three-valued logic

# TRUE, FALSE and UNKNOWN (a comparison with a missing header) as text.
_TEXT = {T: "priority = 5", F: "priority = 6", U: "missing = 'x'"}
_AND = {
    (T, T): T, (T, F): F, (T, U): U,
    (F, T): F, (F, F): F, (F, U): F,
    (U, T): U, (U, F): F, (U, U): U,
}  # fmt: skip
_OR = {
    (T, T): T, (T, F): T, (T, U): T,
    (F, T): T, (F, F): F, (F, U): U,
    (U, T): T, (U, F): U, (U, U): U,
}  # fmt: skip
_NOT = {T: F, F: T, U: U}


@pytest.mark.parametrize(("a", "b"), list(_AND))
def test_and_or_follow_the_jms_truth_tables(a: bool | None, b: bool | None) -> None:
    """Given every pair of TRUE, FALSE and UNKNOWN, expect AND and OR to give
    the JMS (SQL) three-valued results, and a message to match only on TRUE."""
    assert ev(f"{_TEXT[a]} AND {_TEXT[b]}") is _AND[a, b]
    assert ev(f"{_TEXT[a]} OR {_TEXT[b]}") is _OR[a, b]
    assert compile_filter(f"{_TEXT[a]} AND {_TEXT[b]}").matches(MSG) is (_AND[a, b] is T)


@pytest.mark.parametrize("a", [T, F, U])
def test_not_keeps_unknown_unknown(a: bool | None) -> None:
    assert ev(f"NOT {_TEXT[a]}") is _NOT[a]
    assert compile_filter(f"NOT {_TEXT[a]}").matches(MSG) is (_NOT[a] is T)


@cases(
    ("missing = 'x'", U),
    ("missing <> 'x'", U),
    ("t[9] = 1", U),  # no such tuple field
    ("t[3] = 1", U),  # a null tuple field
    ("reply_to = 'x'", F),
    ("content_type = 'x'", U),  # unset
    ("t[9] + 1 = 1", U),  # arithmetic on NULL is NULL
    ("-t[9] = 1", U),
    ("t[9]", U),
    ("t[0]", U),  # a string used as a condition
    ("t[5]", T),
    ("NOT t[5]", F),
    ("t[9] BETWEEN 1 AND 2", U),
    ("t[9] NOT BETWEEN 1 AND 2", U),
    ("t[1] BETWEEN t[9] AND 9", U),
    ("t[1] BETWEEN 8 AND t[9]", F),  # 7 >= 8 is FALSE, so AND is FALSE
    ("t[1] NOT BETWEEN 8 AND t[9]", T),  # 7 < 8 is TRUE, so OR is TRUE
    ("missing IN ('a')", U),
    ("missing NOT IN ('a')", U),
    ("missing LIKE '%'", U),
    ("missing NOT LIKE '%'", U),
)
def test_null_makes_unknown(text: str, expected: bool | None) -> None:
    """Given missing headers and tuple fields, null fields and unset
    optional fields, expect NULL to spread into UNKNOWN as JMS defines."""
    assert ev(text) is expected


@cases(
    ("missing IS NULL", T),
    ("missing IS NOT NULL", F),
    ("color IS NULL", F),
    ("color is not null", T),
    ("t[3] IS NULL", T),
    ("t[9] IS NULL", T),
    ("t[0] IS NOT NULL", T),
    ("content_type IS NULL", T),
    ("expires_at IS NULL", T),
    ("t[1] / 0 IS NULL", T),
    ("(missing = 'x') IS NULL", T),  # an UNKNOWN condition is NULL
)
def test_is_null(text: str, expected: bool | None) -> None:
    assert ev(text) is expected


# ---------------------------------------------------------------- predicates


@cases(
    ("color IN ('red', 'blue')", T),
    ("color IN ('blue')", F),
    ("color NOT IN ('blue', 'green')", T),
    ("color NOT IN ('red')", F),
    ("t[1] IN (1, 7.0)", T),
    ("t[2] IN (2.5)", T),
    ("priority IN (-5, 5)", T),
    ("priority NOT IN (+5)", F),
    ("t[5] IN (TRUE)", T),
    ("t[5] IN (1)", F),
)
def test_in(text: str, expected: bool | None) -> None:
    assert ev(text) is expected


@cases(
    ("priority BETWEEN 5 AND 9", T),  # both ends included
    ("priority BETWEEN 1 AND 5", T),
    ("priority BETWEEN 6 AND 9", F),
    ("priority BETWEEN 9 AND 1", F),
    ("priority NOT BETWEEN 6 AND 9", T),
    ("priority NOT BETWEEN 1 AND 9", F),
    ("t[2] BETWEEN 2 AND 3", T),
    ("color BETWEEN 'a' AND 'z'", T),
    ("priority BETWEEN 2 + 3 AND 10 AND color = 'red'", T),
)
def test_between(text: str, expected: bool | None) -> None:
    assert ev(text) is expected


@cases(
    ("address LIKE 'rec.%'", T),
    ("address LIKE 'rec.pets.cats'", T),
    ("address LIKE 'rec'", F),
    ("address LIKE '%cats'", T),
    ("address LIKE '%pets%'", T),
    ("address LIKE 'rec._ets.%'", T),
    ("address LIKE '_'", F),
    ("address LIKE '%'", T),
    ("address LIKE '%%%'", T),
    ("address NOT LIKE 'rec.%'", F),
    ("color LIKE 'r_d'", T),
    ("color LIKE 'r__d'", F),
    ("color LIKE 'R%'", F),  # case-sensitive
    ("'50%' LIKE '50!%' ESCAPE '!'", T),
    ("'50x' LIKE '50!%' ESCAPE '!'", F),
    ("'a_b' LIKE 'a\\_b' ESCAPE '\\'", T),
    ("'axb' LIKE 'a\\_b' ESCAPE '\\'", F),
    ("'a!b' LIKE 'a!!b' ESCAPE '!'", T),
    ("'a%b' LIKE 'a%%b' ESCAPE '%'", T),
    ("'ab' LIKE 'a%%b' ESCAPE '%'", F),
    ("'' LIKE ''", T),
    ("'' LIKE '%'", T),
    ("'' LIKE '_'", F),
    ("'é' LIKE '_'", T),  # one character, not one byte
    ("'abba' LIKE 'ab%ba'", T),
    ("'aba' LIKE 'ab%ba'", F),  # segments do not overlap
    ("'xaxbxc' LIKE '%a%b%c'", T),
    ("'xcxbxa' LIKE '%a%b%c'", F),
    ("'a\nb' LIKE 'a_b'", T),
)
def test_like(text: str, expected: bool | None) -> None:
    """Given _ (one character), % (any run) and ESCAPE, expect SQL LIKE."""
    assert ev(text) is expected


# ---------------------------------------------------------------- arithmetic and precedence


@cases(
    ("1 + 2 * 3 = 7", T),
    ("(1 + 2) * 3 = 9", T),
    ("10 - 2 - 3 = 5", T),  # left to right
    ("12 / 3 / 2 = 2", T),
    ("-2 * 3 = -6", T),
    ("- -2 = 2", T),
    ("+priority = 5", T),
    ("-priority < 0", T),
    ("7 / 2 = 3", T),  # int / int truncates, as Java's long division
    ("-7 / 2 = -3", T),  # toward zero
    ("7 / -2 = -3", T),
    ("7.0 / 2 = 3.5", T),
    ("7 / 2.0 = 3.5", T),
    ("1 / 0 = 1", U),  # division by zero is NULL
    ("1.0 / 0 IS NULL", T),
    ("9223372036854775807 + 1 = 9223372036854775808", T),  # exact, no wrap-around
    ("-9223372036854775808 < priority", T),
    ("t[1] * 2 + t[2] = 16.5", T),
    ("priority * 1.5 = 7.5", T),
    ("NOT priority = 6 AND color = 'red'", T),  # NOT binds tighter than AND
    ("NOT (priority = 5 AND color = 'blue')", T),
    ("priority = 6 AND color = 'red' OR TRUE", T),  # AND before OR
    ("TRUE OR priority = 6 AND FALSE", T),
    ("(TRUE OR priority = 6) AND FALSE", F),
    ("NOT NOT TRUE", T),
    ("priority + 1 BETWEEN 6 AND 6", T),
    ("priority * 2 IN (10)", T),
)
def test_arithmetic_and_precedence(text: str, expected: bool | None) -> None:
    """Given arithmetic and logical operators mixed, expect JMS precedence:
    sign, then * /, then + -, then comparisons, NOT, AND, OR."""
    assert ev(text) is expected


def test_a_huge_int_times_a_float_is_null() -> None:
    """Given an integer too large for a float, expect NULL, not an error."""
    big = " * ".join(["9223372036854775807"] * 20)
    assert ev(f"{big} * 1.5 IS NULL") is T
    assert ev(f"{big} > 1.5") is T


# ---------------------------------------------------------------- names and literals


@cases(
    ("address = 'rec.pets.cats'", T),
    ("priority = 5", T),
    ("reply_to = 'replies'", T),
    ("seq = 42", T),
    ("posted_at = 1000", T),
    ("delivery_count = 1", T),
    ("Priority IS NULL", T),  # names are case-sensitive: a header
    ("Size = 'L'", T),
    ("size IS NULL", T),
    ("header['priority'] = 'high'", T),  # a header named like a field
    ("header['content-type'] = 'x'", T),  # a header that is not a name
    ("header['color'] = color", T),
    ("color = 'red' and priority between 1 And 9", T),  # keywords in any case
)
def test_names(text: str, expected: bool | None) -> None:
    """Given message fields, headers by name and by header['k'], expect
    names case-sensitive and keywords not."""
    assert ev(text) is expected


@cases(
    ("'it''s' LIKE 'it_s'", T),  # '' is a quote
    ("7E3 = 7000", T),
    ("7e-1 = 0.7", T),
    ("7. = 7", T),
    (".5 = 0.5", T),
    ("-957 < 0", T),
    ("+62 = 62", T),
    ("TRUE", T),
    ("false", F),
)
def test_literals(text: str, expected: bool | None) -> None:
    assert ev(text) is expected


def test_every_message_field_is_a_name() -> None:
    """Given each name in FIELDS, expect it to compile and read the field."""
    for name in FIELDS:
        assert compile_filter(f"{name} IS NULL OR {name} IS NOT NULL").matches(MSG)


# ---------------------------------------------------------------- errors and bounds


@pytest.mark.parametrize(
    ("text", "message", "column"),
    [
        ("", "expected a value, found the end", 1),
        ("   ", "expected a value, found the end", 4),
        ("priority >", "expected a value, found the end", 11),
        ("priority > AND 3", "expected a value, found the keyword AND", 12),
        ("a = b = c", "comparisons do not chain; use parentheses", 7),
        ("(a = 'b'", "expected ), found the end", 9),
        ("a = 'b')", "unexpected ) without a matching (", 8),
        ("a = 'b' c", "unexpected c", 9),
        ("a = 'abc", "unterminated string", 5),
        ("a = 1.2.3", "bad number '1.2.3'", 5),
        ("a = 12abc", "bad number '12abc'", 5),
        ("a = 0x1F", "bad number '0x1F'", 5),
        ("a = 1L", "bad number '1L'", 5),
        ("a = 017", "integer '017' has a leading zero: octal is not supported, write 17", 5),
        ("a = 08", "integer '08' has a leading zero", 5),
        ("t[0] IN (1, 00)", "integer '00' has a leading zero: octal is not supported, write 0", 13),
        ("a = 99999999999999999999", "integer literal outside the 64-bit range", 5),
        ("a = 1e999", "number literal outside the float range", 5),
        ("a ≠ b", "unexpected character '≠'", 3),
        ('a = "b"', "unexpected character '\"'", 5),
        ("t = 1", "t is the tuple: write t[0]", 1),
        ("t[64] = 1", "a tuple index is an integer from 0 to 63", 3),
        ("t[1.5] = 1", "a tuple index is an integer from 0 to 63", 3),
        ("t[0 = 1", "expected ], found =", 5),
        ("header = 'x'", "write header['key']", 1),
        ("header[''] = 'x'", "a header key is a non-empty string literal", 8),
        ("NULL IS NULL", "NULL is only allowed in IS NULL and IS NOT NULL", 1),
        ("a IS 'x'", "expected NULL, found 'x'", 6),
        ("a IN ()", "an IN list holds literals, found )", 7),
        ("a IN ('x', a)", "an IN list holds literals, found a", 12),
        ("a IN ('x', 1)", "an IN list mixes types", 3),
        ("a IN ('x'", "expected ), found the end", 10),
        ("a LIKE b", "LIKE needs a string literal pattern, found b", 8),
        ("a LIKE 'x' ESCAPE 'ab'", "ESCAPE needs a one-character string literal", 19),
        ("a LIKE 'x!' ESCAPE '!'", "LIKE pattern: the escape '!' at character 2", 8),
        ("a LIKE 'x!y' ESCAPE '!'", "must be followed by %, _ or itself", 8),
        ("a BETWEEN 1 OR 2", "expected AND, found OR", 13),
        ("TRUE BETWEEN FALSE AND TRUE", "BETWEEN needs numbers or strings", 6),
        ("a = 'b' AND", "expected a value, found the end", 12),
    ],
)
def test_syntax_errors_say_what_and_where(text: str, message: str, column: int) -> None:
    """Given a filter that does not compile, expect InvalidArgument saying
    what is wrong, at which column, and the text with a caret under it."""
    with pytest.raises(InvalidArgument) as e:
        compile_filter(text)
    first, excerpt, caret = str(e.value).split("\n")
    assert message in first and first.endswith(f"at column {column}")
    assert excerpt == "  " + text and caret == "  " + " " * (column - 1) + "^"


def test_the_caret_shows_a_window_of_a_long_filter() -> None:
    text = "a = 'x' AND " * 10 + "b = = 1 AND " + "c = 'y' AND " * 10 + "TRUE"
    with pytest.raises(InvalidArgument) as e:
        compile_filter(text)
    _, excerpt, caret = str(e.value).split("\n")
    assert excerpt.startswith("  …") and excerpt.endswith("…")
    assert excerpt[caret.index("^") :].startswith("= 1")


def test_nesting_thousands_deep_is_refused_at_the_bound() -> None:
    """Given parentheses, NOTs and signs nested past MAX_DEPTH, expect
    InvalidArgument, never a RecursionError; at the bound, a working filter."""
    for text in (
        "(" * 2000 + "TRUE" + ")" * 2000,
        "NOT " * 1000 + "TRUE",
        "- " * 2000 + "1 = 1",
        "t[0] = " + "(1+" * 700 + "1" + ")" * 700,
    ):
        assert len(text) <= MAX_FILTER_CHARS
        with pytest.raises(InvalidArgument, match=f"nested more than {MAX_DEPTH} deep"):
            compile_filter(text)
    deep = "(" * (MAX_DEPTH - 1) + "TRUE" + ")" * (MAX_DEPTH - 1)
    assert compile_filter(deep).matches(MSG)
    assert compile_filter("NOT " * (MAX_DEPTH - 2) + "TRUE").matches(MSG)


def test_long_flat_chains_do_not_nest() -> None:
    """Given a thousand-term chain of one operator, expect it to compile and
    run flat: a + b + c does not nest one level per term."""
    terms = 1000
    assert compile_filter("1" + " + 1" * terms + f" = {terms + 1}").matches(MSG)
    assert compile_filter(" OR ".join(["priority = 6"] * 250) + " OR TRUE").matches(MSG)
    assert not compile_filter(" AND ".join(["TRUE"] * 400) + " AND FALSE").matches(MSG)


def test_over_long_filters_and_like_patterns_are_refused() -> None:
    with pytest.raises(InvalidArgument, match=f"at most {MAX_FILTER_CHARS}"):
        compile_filter("TRUE OR " * 600 + "TRUE")
    with pytest.raises(InvalidArgument, match=f"at most {MAX_LIKE_CHARS}"):
        compile_filter(f"a LIKE '{'%' * (MAX_LIKE_CHARS + 1)}'")
    assert compile_filter(f"a LIKE '{'%' * MAX_LIKE_CHARS}'")


def test_like_patterns_built_to_be_slow_are_not() -> None:
    """Given the patterns that make a backtracking regex exponential, on
    long values, expect an answer (under the test timeout): '%a%a…%a%b%' as
    '.*a.*a….*a.*b.*' tries about C(n, k) ways on n 'a's before it fails,
    which for 200,000 characters and k = 60 is beyond any patience."""
    long_a = "a" * 200_000
    assert not compile_like("%a" * 60 + "%b%")(long_a)
    assert not compile_like("%a" * 60 + "%b")(long_a)
    assert compile_like("%a" * 60 + "%")(long_a)
    assert not compile_like("%" + "a_" * 60 + "b%")(long_a)
    assert not compile_like("_" * 100 + "%" + "a%" * 50 + "b")(long_a)
    assert compile_filter("t[0] LIKE '" + "%a" * 60 + "%'").matches(Message(tuple=(long_a,)))
