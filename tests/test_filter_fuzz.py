"""The filter language at random: a fuzzed parser (any text compiles or is
refused, never another error), then well-formed filters generated with
their meaning by a reference evaluator written apart from the compiler."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from msgboard.associative.filter import compile_filter
from msgboard.errors import InvalidArgument
from msgboard.message import Message
from tests.test_filter import _AND, _NOT, _OR, MSG

# ---------------------------------------------------------------- the parser, fuzzed

_WORDS = [
    "(", ")", "'", "''", "'a'", "t[", "]", "t[0]", "header['x']", "[", ",", "NOT",
    "AND", "OR", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE",
    "1", "2.5", ".5", "7E3", "-", "+", "*", "/", "=", "<>", "<", ">=", "!=",
    "priority", "address", "color", "x", "'%_'", "'!'", "1e999", "t", "header",
]  # fmt: skip
_MESSAGES = [
    MSG,
    Message(),
    Message(tuple=(1, "a", None), address="a", priority=2, headers={"color": "a", "x-y": "ab"}),
    Message(tuple=(2.5, "ab", True), address="", priority=-1),
    Message(tuple=("a", b"a", 0), address="ab", headers={"color": ""}),
    Message(tuple=(float("nan"), 0.0, "it's"), address="ba", headers={"x-y": "b"}),
    Message(tuple=(False, 2**63 - 1, -3), priority=2**63 - 1),
]


def _parses_or_refuses(text: str) -> None:
    try:
        f = compile_filter(text)
    except InvalidArgument:
        return
    for m in _MESSAGES:
        assert f.evaluate(m) in (True, False, None)


@settings(max_examples=1500, database=None, deadline=None)
@given(st.text(max_size=120))
def test_random_text_compiles_or_is_refused(text: str) -> None:
    """Given any text, expect a Filter or InvalidArgument, never another
    error, and a compiled one to evaluate on any message."""
    _parses_or_refuses(text)


@settings(max_examples=3000, database=None, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=40), st.sampled_from([" ", ""]))
def test_random_token_soup_compiles_or_is_refused(words: list[str], sep: str) -> None:
    _parses_or_refuses(sep.join(words))


# ---------------------------------------------------------------- a reference evaluator
#
# Well-formed expressions are generated together with their meaning,
# computed by definitions written independently of the compiler: truth
# tables, a dynamic-programming LIKE, IN and BETWEEN spelled out.

Ref = Callable[[Message], Any]
Expr = tuple[str, Ref]


def _num(v: Any) -> bool:
    return type(v) in (int, float)


def _ref_cmp(op: str, a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    if not (_num(a) and _num(b)) and type(a) is not type(b):
        return False
    if type(a) is bool and op not in ("=", "<>"):
        return False
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    equal = nan or a == b
    return {
        "=": equal,
        "<>": not equal,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[op]


def _ref_arith(op: str, a: Any, b: Any) -> Any:
    if not (_num(a) and _num(b)):
        return None
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if b == 0:
            return None
        if type(a) is int and type(b) is int:
            return int(Fraction(a, b))
        return a / b
    except OverflowError:
        return None


def _ref_like(s: str, items: list[str | None]) -> bool:
    """None is %, "" is _, anything else a literal character."""
    row = [True] + [False] * len(s)
    for it in items:
        if it is None:
            row = [any(row[: j + 1]) for j in range(len(s) + 1)]
        else:
            row = [False] + [row[j] and (it == "" or s[j] == it) for j in range(len(s))]
    return row[-1]


def _truth(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _tuple_field(i: int) -> Expr:
    return f"t[{i}]", lambda m: m.tuple[i] if i < len(m.tuple) else None


def _lit(v: Any, text: str) -> Expr:
    return text, lambda m: v


_int_lits = st.integers(-3, 3).map(lambda i: _lit(i, str(i)))
_float_lits = st.sampled_from([0.0, 0.5, 2.5, -1.5]).map(lambda f: _lit(f, repr(f)))
_str_values = st.sampled_from(["", "a", "ab", "ba", "it's"])
_str_lits = _str_values.map(lambda s: _lit(s, "'" + s.replace("'", "''") + "'"))
_fields = st.integers(0, 3).map(_tuple_field)

nums: st.SearchStrategy[Expr] = st.deferred(
    lambda: st.one_of(
        _int_lits,
        _float_lits,
        _fields,
        st.just(("priority", lambda m: m.priority)),
        nums.map(lambda e: (f"(-{e[0]})", lambda m, f=e[1]: -v if _num(v := f(m)) else None)),
        st.tuples(st.sampled_from("+-*/"), nums, nums).map(
            lambda x: (
                f"({x[1][0]} {x[0]} {x[2][0]})",
                lambda m, op=x[0], a=x[1][1], b=x[2][1]: _ref_arith(op, a(m), b(m)),
            )
        ),
    )
)
strs: st.SearchStrategy[Expr] = st.one_of(
    _str_lits,
    _fields,
    st.just(("address", lambda m: m.address)),
    st.just(("color", lambda m: m.headers.get("color"))),
    st.just(("header['x-y']", lambda m: m.headers.get("x-y"))),
)
_ops = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])
_like_items = st.lists(st.sampled_from([None, "", "a", "b", "%", "_", "!"]), max_size=6)


def _like_text(items: list[str | None]) -> str:
    return "".join(
        "%" if i is None else "_" if i == "" else f"!{i}" if i in "%_!" else i for i in items
    )


def _between(x: tuple[bool, Expr, Expr, Expr]) -> Expr:
    neg, (v, vf), (lo, lof), (hi, hif) = x
    if neg:
        return (
            f"({v} NOT BETWEEN {lo} AND {hi})",
            lambda m: _OR[_ref_cmp("<", vf(m), lof(m)), _ref_cmp(">", vf(m), hif(m))],
        )
    return (
        f"({v} BETWEEN {lo} AND {hi})",
        lambda m: _AND[_ref_cmp(">=", vf(m), lof(m)), _ref_cmp("<=", vf(m), hif(m))],
    )


def _in(x: tuple[bool, Expr, list[Expr]]) -> Expr:
    neg, (v, vf), items = x

    def ref(m: Message) -> Any:
        value, first = vf(m), items[0][1](m)
        if value is None:
            return None
        if not (_num(value) and _num(first)) and type(value) is not type(first):
            return False  # unlike types: FALSE, negated or not
        return any(_ref_cmp("=", value, f(m)) for _, f in items) is not neg

    word = "NOT IN" if neg else "IN"
    return f"({v} {word} ({', '.join(t for t, _ in items)}))", ref


def _like(x: tuple[bool, Expr, list[str | None]]) -> Expr:
    neg, (v, vf), items = x

    def ref(m: Message) -> Any:
        s = vf(m)
        if s is None:
            return None
        if type(s) is not str:
            return False
        return _ref_like(s, items) is not neg

    word = "NOT LIKE" if neg else "LIKE"
    return f"({v} {word} '{_like_text(items)}' ESCAPE '!')", ref


def _is_null(x: tuple[bool, Expr]) -> Expr:
    neg, (v, vf) = x
    word = "IS NOT NULL" if neg else "IS NULL"
    return f"({v} {word})", lambda m: (vf(m) is None) is not neg


def _compare(x: tuple[str, Expr, Expr]) -> Expr:
    op, (a, af), (b, bf) = x
    return f"({a} {op} {b})", lambda m: _ref_cmp(op, af(m), bf(m))


def _logic(x: tuple[str, Expr, Expr]) -> Expr:
    op, (a, af), (b, bf) = x
    table = _AND if op == "AND" else _OR
    return f"({a} {op} {b})", lambda m: table[_truth(af(m)), _truth(bf(m))]


conds: st.SearchStrategy[Expr] = st.deferred(
    lambda: st.one_of(
        st.sampled_from([_lit(True, "TRUE"), _lit(False, "FALSE")]),
        _fields,
        st.tuples(_ops, nums, nums).map(_compare),
        st.tuples(_ops, strs, strs).map(_compare),
        st.tuples(st.booleans(), nums, nums, nums).map(_between),
        st.tuples(st.booleans(), strs, st.lists(_str_lits, min_size=1, max_size=3)).map(_in),
        st.tuples(
            st.booleans(), nums, st.lists(st.one_of(_int_lits, _float_lits), min_size=1, max_size=3)
        ).map(_in),
        st.tuples(st.booleans(), strs, _like_items).map(_like),
        st.tuples(st.booleans(), st.one_of(nums, strs)).map(_is_null),
        conds.map(lambda e: (f"(NOT {e[0]})", lambda m, f=e[1]: _NOT[_truth(f(m))])),
        st.tuples(st.sampled_from(["AND", "OR"]), conds, conds).map(_logic),
    )
)


@settings(max_examples=2000, database=None, deadline=None)
@given(conds)
def test_compiled_filters_agree_with_the_reference(expr: Expr) -> None:
    """Given a random well-formed filter, expect the compiled predicate and
    the reference definitions to agree on every message of a varied pool."""
    text, ref = expr
    try:
        f = compile_filter(text)
    except InvalidArgument as e:
        assert "nested more than" in str(e) or "at most" in str(e)
        return
    for m in _MESSAGES:
        assert f.evaluate(m) is _truth(ref(m)), (text, m)
