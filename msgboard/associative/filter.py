"""Filters: JMS message selectors (SQL-92 conditions), compiled once.

``compile_filter(text)`` parses a filter and compiles it into a tree of
closures; ``Filter.matches(msg)`` runs them on one message. Nothing is ever
``eval``-ed. The grammar, by binding power (loosest first)::

    filter  := expr                              -- a condition
    expr    := expr OR expr | expr AND expr | NOT expr
             | sum (= | <> | != | < | <= | > | >=) sum
             | sum [NOT] BETWEEN sum AND sum
             | sum [NOT] IN (literal, ...)
             | sum [NOT] LIKE 'pattern' [ESCAPE 'c']
             | sum IS [NOT] NULL
             | sum
    sum     := sum (+ | -) sum | sum (* | /) sum | (+ | -) sum
             | literal | name | t[INDEX] | header['key'] | ( expr )
    literal := 'string' (with '' for ') | 57 | 5.7 | .5 | 7E3 | TRUE | FALSE

Keywords are case-insensitive, names case-sensitive. Comparisons do not
chain (``a = b = c`` is an error). A name is one of the message fields in
``FIELDS`` or else a header; ``header['k']`` reaches any header, and
``t[i]`` is tuple field ``i``.

Values are NULL, booleans, numbers (int, float), strings and bytes (from
tuples). Missing headers and tuple fields, null tuple fields and unset
optional fields are NULL; any comparison or arithmetic with NULL is NULL,
which as a condition is UNKNOWN, and ``AND``/``OR``/``NOT`` follow the
three-valued truth tables of JMS (SQL). A message matches only when the
filter is TRUE.

Types are checked twice. At compile time, where both sides have a known
type (literals, arithmetic, message fields and headers, which are strings),
a mismatch is InvalidArgument: ``priority = 'high'`` or ``color > 3`` never
compile. Tuple fields have no static type, so at run time JMS's rule holds:
comparing values of unlike types (a string with a number, a bool with
anything but a bool, bytes with anything but bytes) is FALSE, and
arithmetic on a non-number is NULL.

Bounds keep every filter cheap to compile and run: at most
``MAX_FILTER_CHARS`` characters, nesting at most ``MAX_DEPTH`` deep (chains
of one operator, ``a + b + c`` or ``x AND y AND z``, are flattened and do
not nest), LIKE patterns at most ``MAX_LIKE_CHARS`` and matched without
backtracking (``msgboard.associative.like``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NoReturn

from msgboard.associative.like import MAX_LIKE_CHARS, compile_like
from msgboard.associative.tuples import MAX_ARITY
from msgboard.errors import InvalidArgument
from msgboard.message import Message

__all__ = ["FIELDS", "MAX_DEPTH", "MAX_FILTER_CHARS", "MAX_LIKE_CHARS", "Filter", "compile_filter"]

#: The longest filter, in characters.
MAX_FILTER_CHARS = 4096
#: The deepest nesting of parentheses and operators.
MAX_DEPTH = 100

# A compiled node: message -> value (None is NULL / UNKNOWN).
Fn = Callable[[Message], Any]

# Static types of nodes: known ("num", "str", "bool") or only known at run
# time ("any", tuple fields).
_NAMES = {"num": "a number", "str": "a string", "bool": "a condition", "any": "a tuple field"}

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

_KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IN", "BETWEEN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE"}
)
_NUMBER = re.compile(r"(?:[0-9]+(\.[0-9]*)?|(\.)[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_OPS2 = ("<>", "<=", ">=", "!=")
_OPS1 = "=<>+-*/(),[]"
_NUMS = (int, float)

# Binding powers: OR 1, AND 2, NOT 3, comparisons 4, + - 5, * / 6, sign 7.
_CHAIN_BP = {"OR": 1, "AND": 2, "+": 5, "-": 5, "*": 6, "/": 6}
_CMP_BP = 4
_COMPARISONS = ("=", "<>", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # num, str, name, kw, op, end
    value: Any
    pos: int

    def show(self) -> str:
        if self.kind == "end":
            return "the end"
        if self.kind == "str":
            v: str = self.value if len(self.value) <= 20 else self.value[:20] + "…"
            return "'" + v.replace("'", "''") + "'"
        return f"{self.value}"


@dataclass(frozen=True, slots=True)
class _Node:
    kind: str
    fn: Fn
    pos: int
    const: bool = False  # a literal: fn ignores the message


class Filter:
    """A compiled filter; ``matches`` is the per-message test."""

    __slots__ = ("_test", "text")

    def __init__(self, text: str, test: Fn) -> None:
        self.text = text
        self._test = test

    def matches(self, msg: Message) -> bool:
        """True only if the filter is TRUE for ``msg`` (not FALSE or UNKNOWN)."""
        return self._test(msg) is True

    def evaluate(self, msg: Message) -> bool | None:
        """TRUE, FALSE or UNKNOWN (None) for ``msg``."""
        r: bool | None = self._test(msg)
        return r

    def __repr__(self) -> str:
        return f"compile_filter({self.text!r})"


def compile_filter(text: str) -> Filter:
    """Parses and compiles ``text``; InvalidArgument saying what is wrong and
    at which column, with the text and a caret under the place."""
    if not isinstance(text, str):
        raise InvalidArgument(f"a filter is a string, not {type(text).__name__}")
    if len(text) > MAX_FILTER_CHARS:
        raise InvalidArgument(f"filter of {len(text)} characters, at most {MAX_FILTER_CHARS}")
    return Filter(text, _Parser(text).parse())


def _fail(text: str, pos: int, what: str) -> NoReturn:
    line = "".join(" " if c.isspace() else c for c in text)
    lo, hi = max(0, pos - 40), min(len(line), pos + 40)
    excerpt = ("…" if lo else "") + line[lo:hi] + ("…" if hi < len(line) else "")
    caret = pos - lo + (1 if lo else 0)
    raise InvalidArgument(f"{what} at column {pos + 1}\n  {excerpt}\n  {' ' * caret}^")


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos, n = 0, len(text)
    while pos < n:
        c = text[pos]
        if c.isspace():
            pos += 1
        elif c == "'":
            parts, j = [], pos + 1
            while True:
                k = text.find("'", j)
                if k < 0:
                    _fail(text, pos, "unterminated string")
                parts.append(text[j:k])
                if text.startswith("'", k + 1):
                    parts.append("'")
                    j = k + 2
                else:
                    break
            out.append(_Tok("str", "".join(parts), pos))
            pos = k + 1
        elif c in "0123456789." and (m := _NUMBER.match(text, pos)):
            end = m.end()
            if end < n and (text[end].isalnum() or text[end] in "_$."):
                _fail(text, pos, f"bad number {text[pos : end + 1]!r}")
            digits = m.group()
            value: int | float
            if m.group(1) is None and m.group(2) is None and m.group(3) is None:
                value = int(digits)
                if value > 2**63:
                    _fail(text, pos, "integer literal outside the 64-bit range")
            else:
                value = float(digits)
                if value in (float("inf"), float("-inf")):
                    _fail(text, pos, "number literal outside the float range")
            out.append(_Tok("num", value, pos))
            pos = end
        elif c.isalpha() or c in "_$":
            j = pos + 1
            while j < n and (text[j].isalnum() or text[j] in "_$"):
                j += 1
            word = text[pos:j]
            # ASCII only: a dotless i upper-cases to I, which would make keywords.
            up = word.upper() if word.isascii() else word
            out.append(_Tok("kw", up, pos) if up in _KEYWORDS else _Tok("name", word, pos))
            pos = j
        elif text[pos : pos + 2] in _OPS2:
            out.append(_Tok("op", text[pos : pos + 2], pos))
            pos += 2
        elif c in _OPS1:
            out.append(_Tok("op", c, pos))
            pos += 1
        else:
            _fail(text, pos, f"unexpected character {c!r}")
    out.append(_Tok("end", None, n))
    return out


class _Parser:
    """Precedence climbing (Pratt) over the token list, compiling as it goes.

    Each nesting level costs two Python frames here and about one at run
    time, so ``MAX_DEPTH`` keeps both far from the recursion limit."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0

    # -- tokens ---------------------------------------------------------

    def peek(self, ahead: int = 0) -> _Tok:
        return self.toks[min(self.i + ahead, len(self.toks) - 1)]

    def take(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "end":
            self.i += 1
        return t

    def is_(self, kind: str, value: str, ahead: int = 0) -> bool:
        t = self.peek(ahead)
        return t.kind == kind and t.value == value

    def expect(self, kind: str, value: str) -> _Tok:
        t = self.peek()
        if t.kind != kind or t.value != value:
            self.fail(f"expected {value}, found {t.show()}", t)
        return self.take()

    def fail(self, what: str, at: _Tok | _Node | int) -> NoReturn:
        _fail(self.text, at if isinstance(at, int) else at.pos, what)

    # -- types ----------------------------------------------------------

    def cond(self, node: _Node) -> Fn:
        """``node`` as a condition: TRUE, FALSE or UNKNOWN."""
        if node.kind == "bool":
            return node.fn
        if node.kind == "any":
            f = node.fn

            def truth(m: Message) -> Any:
                v = f(m)
                return v if v is True or v is False else None

            return truth
        self.fail(f"expected a condition, found {_NAMES[node.kind]}", node)

    def num(self, node: _Node) -> Fn:
        if node.kind not in ("num", "any"):
            self.fail(f"expected a number, found {_NAMES[node.kind]}", node)
        return node.fn

    def same(self, at: _Tok, *nodes: _Node) -> str:
        """The one static type of ``nodes`` ("any" if none is known)."""
        known = {n.kind for n in nodes} - {"any"}
        if len(known) > 1:
            first, *rest = sorted(known)  # BETWEEN brings three
            others = " or ".join(_NAMES[k] for k in rest)
            self.fail(f"{_NAMES[first]} cannot be compared with {others}", at)
        return known.pop() if known else "any"

    # -- grammar --------------------------------------------------------

    def parse(self) -> Fn:
        node = self.expr(0)
        t = self.peek()
        if t.kind != "end":
            what = ") without a matching (" if t.value == ")" else t.show()
            self.fail(f"unexpected {what}", t)
        return self.cond(node)

    def expr(self, min_bp: int) -> _Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"nested more than {MAX_DEPTH} deep", self.peek())
        left = self.prefix()
        chain_op = ""  # the operator family of the chain being collected
        chain: list[tuple[str, _Node]] = []
        compared = False
        while True:
            t = self.peek()
            op = t.value if t.kind in ("op", "kw") else None
            if op in _CHAIN_BP:
                bp = _CHAIN_BP[op]
                if bp < min_bp:
                    break
                self.take()
                right = self.expr(bp + 1)
                family = "sum" if op in "+-" else "prod" if op in "*/" else op
                if family != chain_op:
                    if chain:
                        left = self.chain(chain_op, chain)
                    chain_op, chain = family, [("", left)]
                chain.append((op, right))
                compared = False
                continue
            if not self.is_comparison():
                break
            if min_bp > _CMP_BP:
                break
            if chain:
                left, chain_op, chain = self.chain(chain_op, chain), "", []
            if compared:
                self.fail("comparisons do not chain; use parentheses", t)
            left = self.comparison(left)
            compared = True
        if chain:
            left = self.chain(chain_op, chain)
        self.depth -= 1
        return left

    def is_comparison(self) -> bool:
        t = self.peek()
        if t.kind == "op":
            return t.value in _COMPARISONS
        if t.kind != "kw":
            return False
        if t.value == "NOT":
            nxt = self.peek(1)
            return nxt.kind == "kw" and nxt.value in ("BETWEEN", "IN", "LIKE")
        return t.value in ("BETWEEN", "IN", "LIKE", "IS")

    def prefix(self) -> _Node:
        t = self.take()
        if t.kind == "num":
            v = t.value
            return _Node("num", lambda m: v, t.pos, const=True)
        if t.kind == "str":
            s = t.value
            return _Node("str", lambda m: s, t.pos, const=True)
        if t.kind == "op" and t.value == "(":
            inner = self.expr(0)
            self.expect("op", ")")
            return _Node(inner.kind, inner.fn, t.pos)
        if t.kind == "op" and t.value in "+-":
            operand = self.expr(7)
            if t.value == "+":
                f = self.num(operand)
                return _Node("num", lambda m: v if type(v := f(m)) in _NUMS else None, t.pos)
            return self.negate(operand, t)
        if t.kind == "kw":
            if t.value in ("TRUE", "FALSE"):
                b = t.value == "TRUE"
                return _Node("bool", lambda m: b, t.pos, const=True)
            if t.value == "NOT":
                f = self.cond(self.expr(3))
                return _Node("bool", lambda m: None if (v := f(m)) is None else not v, t.pos)
            if t.value == "NULL":
                self.fail("NULL is only allowed in IS NULL and IS NOT NULL", t)
            self.fail(f"expected a value, found the keyword {t.value}", t)
        if t.kind == "name":
            return self.name(t)
        self.fail(f"expected a value, found {t.show()}", t)

    def name(self, t: _Tok) -> _Node:
        word: str = t.value
        if word in FIELDS:
            kind, getter = FIELDS[word]
            return _Node(kind, getter, t.pos)
        if word == "t":
            if not self.is_("op", "["):
                self.fail("t is the tuple: write t[0], t[1] …; a header named t is header['t']", t)
            self.take()
            i = self.take()
            if i.kind != "num" or type(i.value) is not int or i.value >= MAX_ARITY:
                self.fail(f"a tuple index is an integer from 0 to {MAX_ARITY - 1}", i)
            self.expect("op", "]")
            index: int = i.value

            def field(m: Message) -> Any:
                fields = m.tuple
                return fields[index] if index < len(fields) else None

            return _Node("any", field, t.pos)
        if word == "header":
            if not self.is_("op", "["):
                self.fail("write header['key']; a header named header is header['header']", t)
            self.take()
            k = self.take()
            if k.kind != "str" or not k.value:
                self.fail("a header key is a non-empty string literal, as in header['k']", k)
            self.expect("op", "]")
            word = k.value
        key = word
        return _Node("str", lambda m: m.headers.get(key), t.pos)

    def negate(self, operand: _Node, t: _Tok) -> _Node:
        f = self.num(operand)
        if operand.const:
            # Fold a literal, so that -9223372036854775808 is one constant.
            v = -f(Message())
            return _Node("num", lambda m: v, t.pos, const=True)
        return _Node("num", lambda m: -v if type(v := f(m)) in _NUMS else None, t.pos)

    def chain(self, family: str, items: list[tuple[str, _Node]]) -> _Node:
        pos = items[0][1].pos
        if family in ("AND", "OR"):
            fns = [self.cond(n) for _, n in items]
            return _Node("bool", _logic(fns, decisive=family == "OR"), pos)
        first = self.num(items[0][1])
        rest = [(_ARITH[op], self.num(n)) for op, n in items[1:]]
        return _Node("num", _arith(first, rest), pos)

    def comparison(self, left: _Node) -> _Node:
        t = self.take()
        op: str = t.value
        if t.kind == "op":
            right = self.expr(5)
            kind = self.same(t, left, right)
            if kind == "bool" and op not in ("=", "<>", "!="):
                self.fail(f"booleans compare only with = and <>, not {op}", t)
            test = _COMPARE["<>" if op == "!=" else op]
            lf, rf = left.fn, right.fn
            return _Node("bool", lambda m: test(lf(m), rf(m)), left.pos)
        negated = op == "NOT"
        if negated:
            t = self.take()
            op = t.value
        if op == "IS":
            negated = self.is_("kw", "NOT")
            if negated:
                self.take()
            self.expect("kw", "NULL")
            f = left.fn
            if negated:
                return _Node("bool", lambda m: f(m) is not None, left.pos)
            return _Node("bool", lambda m: f(m) is None, left.pos)
        if op == "BETWEEN":
            lo = self.expr(5)
            self.expect("kw", "AND")
            hi = self.expr(5)
            if self.same(t, left, lo, hi) == "bool":
                self.fail("BETWEEN needs numbers or strings, not conditions", t)
            return _Node("bool", _between(left.fn, lo.fn, hi.fn, negated), left.pos)
        if op == "IN":
            return _Node("bool", self.in_list(left, t, negated), left.pos)
        return _Node("bool", self.like(left, t, negated), left.pos)

    def in_list(self, left: _Node, t: _Tok, negated: bool) -> Fn:
        self.expect("op", "(")
        items: list[Any] = []
        kinds: set[str] = set()
        while True:
            tok = self.take()
            sign = 1
            if tok.kind == "op" and tok.value in "+-":
                sign = -1 if tok.value == "-" else 1
                tok = self.take()
                if tok.kind != "num":
                    self.fail(f"expected a number after the sign, found {tok.show()}", tok)
            if tok.kind == "num":
                items.append(sign * tok.value)
                kinds.add("num")
            elif tok.kind == "str":
                items.append(tok.value)
                kinds.add("str")
            elif tok.kind == "kw" and tok.value in ("TRUE", "FALSE"):
                items.append(tok.value == "TRUE")
                kinds.add("bool")
            else:
                self.fail(f"an IN list holds literals, found {tok.show()}", tok)
            if self.is_("op", ","):
                self.take()
                continue
            self.expect("op", ")")
            break
        if len(kinds) > 1:
            self.fail("an IN list mixes types", t)
        kind = self.same(t, left, _Node(kinds.pop(), left.fn, t.pos))
        types = {"bool": (bool,), "str": (str,)}.get(kind, _NUMS)
        return _typed(left.fn, types, frozenset(items).__contains__, negated)

    def like(self, left: _Node, t: _Tok, negated: bool) -> Fn:
        if left.kind not in ("str", "any"):
            self.fail(f"LIKE needs a string, found {_NAMES[left.kind]}", left)
        pat = self.take()
        if pat.kind != "str":
            self.fail(f"LIKE needs a string literal pattern, found {pat.show()}", pat)
        escape = None
        if self.is_("kw", "ESCAPE"):
            self.take()
            e = self.take()
            if e.kind != "str" or len(e.value) != 1:
                self.fail("ESCAPE needs a one-character string literal", e)
            escape = e.value
        try:
            test = compile_like(pat.value, escape)
        except InvalidArgument as err:
            self.fail(str(err), pat)
        return _typed(left.fn, (str,), test, negated)


# ---------------------------------------------------------------- run time


def _logic(fns: list[Fn], decisive: bool) -> Fn:
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


_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _div,
}


def _arith(first: Fn, rest: list[tuple[Callable[[Any, Any], Any], Fn]]) -> Fn:
    def compute(m: Message) -> Any:
        acc = first(m)
        if type(acc) not in _NUMS:
            return None
        for op, f in rest:
            v = f(m)
            if type(v) not in _NUMS:
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
    return ta is tb or (ta in _NUMS and tb in _NUMS)


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
        if (ta in _NUMS and tb in _NUMS) or (ta is tb and ta in (str, bytes)):
            return test(a, b)
        return False  # unlike types, or booleans

    return compare


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "=": _eq,
    "<>": _ne,
    "<": _ordered(lambda a, b: a < b),
    "<=": _ordered(lambda a, b: a <= b),
    ">": _ordered(lambda a, b: a > b),
    ">=": _ordered(lambda a, b: a >= b),
}


def _typed(f: Fn, types: tuple[type, ...], test: Callable[[Any], bool], negated: bool) -> Fn:
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


def _between(f: Fn, lo: Fn, hi: Fn, negated: bool) -> Fn:
    ge, le, lt, gt = _COMPARE[">="], _COMPARE["<="], _COMPARE["<"], _COMPARE[">"]

    def between(m: Message) -> Any:
        v = f(m)
        if negated:  # v < lo OR v > hi
            a, b = lt(v, lo(m)), gt(v, hi(m))
            return True if a is True or b is True else None if a is None or b is None else False
        a, b = ge(v, lo(m)), le(v, hi(m))  # v >= lo AND v <= hi
        return False if a is False or b is False else None if a is None or b is None else True

    return between
