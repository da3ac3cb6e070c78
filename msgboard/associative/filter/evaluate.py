"""What a compiled filter runs: ``Filter``, the message fields a filter
can name, and the run-time operators of the language in JMS's (SQL's)
three-valued logic, NULL (None) as UNKNOWN.

``parse`` builds each filter as a tree of closures over these; here is what
they do to values: ``AND``/``OR`` over TRUE, FALSE and UNKNOWN, arithmetic
that is NULL on a non-number or a division by zero (integer division
truncated toward zero, as Java's), comparisons that are FALSE for unlike
types (a string with a number, a bool with anything but a bool) and treat
every NaN as one value, and ``[NOT] IN``, ``[NOT] LIKE`` and ``[NOT]
BETWEEN`` with the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from msgboard.message import Message

#: A compiled node: message -> value (None is NULL / UNKNOWN).
Fn = Callable[[Message], Any]

#: The number types of the language (a bool is not one).
NUMS = (int, float)

#: The message fields a filter can name, with their types. An unset
#: ``reply_to``, ``content_type`` or ``expires_at`` is NULL.
FIELDS: dict[str, tuple[str, Fn]] = {
    "address": ("str", attrgetter("address")),
    "priority": ("num", attrgetter("priority")),
    "reply_to": ("str", lambda m: m.reply_to or None),
    "content_type": ("str", lambda m: m.content_type or None),
    "seq": ("num", attrgetter("seq")),
    "posted_at": ("num", attrgetter("posted_at")),
    "expires_at": ("num", lambda m: m.expires_at or None),
    "delivery_count": ("num", attrgetter("delivery_count")),
}


class Filter:
    """A compiled filter; ``matches`` is the per-message test."""

    __slots__ = ("_test", "bare", "text")

    def __init__(self, text: str, test: Fn, bare: tuple[str, ...] = ()) -> None:
        self.text = text
        self._test = test
        #: The bare names the filter reads as headers (``color = 'red'``),
        #: which a misspelt message field (``adress``) is too.
        self.bare = bare

    def matches(self, msg: Message) -> bool:
        """True only if the filter is TRUE for ``msg`` (not FALSE or UNKNOWN)."""
        return self._test(msg) is True

    def evaluate(self, msg: Message) -> bool | None:
        """TRUE, FALSE or UNKNOWN (None) for ``msg``."""
        r: bool | None = self._test(msg)
        return r

    def __repr__(self) -> str:
        return f"compile_filter({self.text!r})"


def logic(fns: list[Fn], decisive: bool) -> Fn:
    """AND (``decisive`` False) or OR (True) in three-valued logic: the
    decisive value wins; else UNKNOWN if any operand is; else the other."""
    other = not decisive

    def combine(m: Message) -> Any:
        r: bool | None = other
        for f in fns:
            v = f(m)
            if v is decisive:
                return decisive
            if v is None:
                r = None
        return r

    return combine


def _div(a: Any, b: Any) -> Any:
    if b == 0:
        return None  # division by zero is NULL, for ints and floats alike
    if type(a) is int and type(b) is int:
        q = a // b  # truncated toward zero, as Java's long division
        return q + 1 if q < 0 and q * b != a else q
    return a / b


ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _div,
}


def arithmetic(first: Fn, rest: list[tuple[Callable[[Any, Any], Any], Fn]]) -> Fn:
    def compute(m: Message) -> Any:
        acc = first(m)
        if type(acc) not in NUMS:
            return None
        for op, f in rest:
            v = f(m)
            if type(v) not in NUMS:
                return None
            try:
                acc = op(acc, v)
            except OverflowError:  # an int too large for a float
                return None
            if acc is None:
                return None
        return acc

    return compute


def _like_types(a: Any, b: Any) -> bool:
    ta, tb = type(a), type(b)
    return ta is tb or (ta in NUMS and tb in NUMS)


def _eq(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if not _like_types(a, b):
        return False
    # Every NaN is one value, as in tuples; -0.0 == 0.0 already holds.
    return a == b or (a != a and b != b)


def _ne(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if not _like_types(a, b):
        return False
    return not (a == b or (a != a and b != b))


def _ordered(test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def compare(a: Any, b: Any) -> Any:
        if a is None or b is None:
            return None
        ta, tb = type(a), type(b)
        if (ta in NUMS and tb in NUMS) or (ta is tb and ta in (str, bytes)):
            return test(a, b)
        return False  # unlike types, or booleans

    return compare


COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "=": _eq,
    "<>": _ne,
    "<": _ordered(lambda a, b: a < b),
    "<=": _ordered(lambda a, b: a <= b),
    ">": _ordered(lambda a, b: a > b),
    ">=": _ordered(lambda a, b: a >= b),
}


def typed(f: Fn, types: tuple[type, ...], test: Callable[[Any], bool], negated: bool) -> Fn:
    """[NOT] IN and [NOT] LIKE: UNKNOWN for NULL, FALSE for a value of another
    type, negated or not (JMS: comparing unlike types is false)."""

    def check(m: Message) -> Any:
        v = f(m)
        if v is None:
            return None
        if type(v) not in types:
            return False
        return test(v) is not negated

    return check


def between_test(f: Fn, lo: Fn, hi: Fn, negated: bool) -> Fn:
    ge, le, lt, gt = COMPARE[">="], COMPARE["<="], COMPARE["<"], COMPARE[">"]

    def between(m: Message) -> Any:
        v = f(m)
        if negated:  # v < lo OR v > hi
            a, b = lt(v, lo(m)), gt(v, hi(m))
            return True if a is True or b is True else None if a is None or b is None else False
        a, b = ge(v, lo(m)), le(v, hi(m))  # v >= lo AND v <= hi
        return False if a is False or b is False else None if a is None or b is None else True

    return between
