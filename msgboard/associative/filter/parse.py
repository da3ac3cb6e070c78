"""The filter parser: text to tokens to a tree of closures, with the types
checked at compile time and every error pointing at its column.

The tokenizer splits the text (strings with '' for ', numbers in the
64-bit and float ranges, keywords case-insensitive); ``Parser`` climbs
precedence (Pratt) over the tokens and compiles as it goes: each node is its
static type ("num", "str", "bool", or "any" for a tuple field, known only at
run time) and a closure built on ``evaluate``'s operators. Nesting is
bounded by ``MAX_DEPTH``, so neither parsing nor running a filter nears the
recursion limit. The grammar is in the package's docstring
(``msgboard.associative.filter``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn

from msgboard.associative.filter.evaluate import (
    ARITH,
    COMPARE,
    FIELDS,
    NUMS,
    Fn,
    arithmetic,
    between_test,
    logic,
    typed,
)
from msgboard.associative.like import compile_like
from msgboard.associative.tuples import MAX_ARITY
from msgboard.errors import InvalidArgument
from msgboard.message import Message

#: The deepest nesting of parentheses and operators.
MAX_DEPTH = 100

# Static types of nodes: known ("num", "str", "bool") or only known at run
# time ("any", tuple fields).
_NAMES = {"num": "a number", "str": "a string", "bool": "a condition", "any": "a tuple field"}

_KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "IN", "BETWEEN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE"}
)
_NUMBER = re.compile(r"(?:[0-9]+(\.[0-9]*)?|(\.)[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_OPS2 = ("<>", "<=", ">=", "!=")
_OPS1 = "=<>+-*/(),[]"

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
                # Quote the whole literal (0x1F, 1L, 12abc), not its first bad character.
                j = end
                while j < n and (text[j].isalnum() or text[j] in "_$."):
                    j += 1
                _fail(text, pos, f"bad number {text[pos:j]!r}")
            digits = m.group()
            value: int | float
            if m.group(1) is None and m.group(2) is None and m.group(3) is None:
                if len(digits) > 1 and digits[0] == "0":
                    # JMS (Java) reads 017 as octal 15 and refuses 08; reading
                    # either as decimal would be a silent difference.
                    _fail(
                        text,
                        pos,
                        f"integer {digits!r} has a leading zero: octal is not supported,"
                        f" write {digits.lstrip('0') or '0'}",
                    )
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


class Parser:
    """Precedence climbing (Pratt) over the token list, compiling as it goes.

    Each nesting level costs two Python frames here and about one at run
    time, so ``MAX_DEPTH`` keeps both far from the recursion limit."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0
        #: The bare names read as headers (``color``, not ``header['color']``),
        #: in order, each once: a misspelt field (``adress``) is one of them.
        self.bare: list[str] = []

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
                return _Node("num", lambda m: v if type(v := f(m)) in NUMS else None, t.pos)
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
        elif word not in self.bare:
            self.bare.append(word)
        key = word
        return _Node("str", lambda m: m.headers.get(key), t.pos)

    def negate(self, operand: _Node, t: _Tok) -> _Node:
        f = self.num(operand)
        if operand.const:
            # Fold a literal, so that -9223372036854775808 is one constant.
            v = -f(Message())
            return _Node("num", lambda m: v, t.pos, const=True)
        return _Node("num", lambda m: -v if type(v := f(m)) in NUMS else None, t.pos)

    def chain(self, family: str, items: list[tuple[str, _Node]]) -> _Node:
        pos = items[0][1].pos
        if family in ("AND", "OR"):
            fns = [self.cond(n) for _, n in items]
            return _Node("bool", logic(fns, decisive=family == "OR"), pos)
        first = self.num(items[0][1])
        rest = [(ARITH[op], self.num(n)) for op, n in items[1:]]
        return _Node("num", arithmetic(first, rest), pos)

    def comparison(self, left: _Node) -> _Node:
        t = self.take()
        op: str = t.value
        if t.kind == "op":
            right = self.expr(5)
            kind = self.same(t, left, right)
            if kind == "bool" and op not in ("=", "<>", "!="):
                self.fail(f"booleans compare only with = and <>, not {op}", t)
            test = COMPARE["<>" if op == "!=" else op]
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
            return _Node("bool", between_test(left.fn, lo.fn, hi.fn, negated), left.pos)
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
        types = {"bool": (bool,), "str": (str,)}.get(kind, NUMS)
        return typed(left.fn, types, frozenset(items).__contains__, negated)

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
        return typed(left.fn, (str,), test, negated)
