"""Templates: what a tuple must look like for a reader to want it.

A template is a list of field patterns, one per position; it matches a tuple
of the same arity whose every field matches its pattern (Linda's
anti-tuples). The patterns are ``Actual(value)`` (that value, typed),
``Formal(type)`` (any value of that type), ``ANY``, ``Range(lo, hi)``
(numbers or strings between, both ends included) and ``Prefix(p)`` (strings
or bytes starting with ``p``).

Matching runs once per candidate message, so each pattern compiles itself to
a small closure when it is built, and a template keeps only the closures of
the positions that constrain anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from msgboard.associative.tuples import (
    INT64_MAX,
    INT64_MIN,
    MAX_ARITY,
    PY_TYPES,
    ValueType,
    check_value,
    same_value,
    value_hash,
)
from msgboard.errors import InvalidArgument
from msgboard.message import Fields, Value

__all__ = [
    "ANY",
    "Actual",
    "AnyField",
    "FieldPattern",
    "Formal",
    "Prefix",
    "Range",
    "Template",
    "template",
]

_Test = Callable[[Value], bool]


@dataclass(frozen=True, slots=True, eq=False)
class Actual:
    """Matches exactly ``value``: same type and same value (see ``same_value``)."""

    value: Value
    _test: _Test = field(init=False, repr=False)

    def __post_init__(self) -> None:
        v = check_value(self.value, "actual")
        t = type(v)
        test: _Test
        if t is float and v != v:

            def test(x: Value) -> bool:
                return type(x) is float and x != x

        else:

            def test(x: Value) -> bool:
                return type(x) is t and x == v

        object.__setattr__(self, "_test", test)

    def matches(self, v: Value) -> bool:
        return self._test(v)

    # Typed, so that Actual(1), Actual(1.0) and Actual(True) stay three keys.
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Actual) and same_value(self.value, other.value)

    def __hash__(self) -> int:
        return value_hash(self.value)


@dataclass(frozen=True, slots=True)
class Formal:
    """Matches any value of one type; ``Formal(ValueType.NULL)`` matches null."""

    type: ValueType
    _test: _Test = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.type, ValueType):
            raise InvalidArgument(f"formal: {self.type!r} is not a ValueType")
        t = PY_TYPES[self.type]

        def test(x: Value) -> bool:
            return type(x) is t

        object.__setattr__(self, "_test", test)

    def matches(self, v: Value) -> bool:
        return self._test(v)


def _always(x: Value) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class AnyField:
    """Matches every value, null included. Use the singleton ``ANY``."""

    def matches(self, v: Value) -> bool:
        return True

    def __repr__(self) -> str:
        return "ANY"


ANY = AnyField()


def _is_number(v: object) -> bool:
    return type(v) is int or type(v) is float


@dataclass(frozen=True, slots=True)
class Range:
    """Matches values between ``lo`` and ``hi``, both included.

    Numeric bounds (int or float, mixed freely) match int and float fields,
    compared exactly (no rounding of large ints), never bool and never NaN.
    String bounds match str fields in codepoint order.
    """

    lo: int | float | str
    hi: int | float | str
    _test: _Test = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lo, hi = self.lo, self.hi
        test: _Test
        if _is_number(lo) and _is_number(hi):
            for name, b in (("lo", lo), ("hi", hi)):
                if b != b:
                    raise InvalidArgument(f"range {name} is NaN")
                if type(b) is int and not INT64_MIN <= b <= INT64_MAX:
                    raise InvalidArgument(f"range {name} {b} does not fit in 64 bits")

            def test(x: Value) -> bool:
                t = type(x)
                return (t is int or t is float) and lo <= x <= hi  # type: ignore[operator]

        elif type(lo) is str and type(hi) is str:
            slo, shi = lo, hi

            def test(x: Value) -> bool:
                return type(x) is str and slo <= x <= shi

        else:
            raise InvalidArgument(
                "range bounds must be both numbers or both strings, "
                f"not {type(lo).__name__} and {type(hi).__name__}"
            )
        if lo > hi:  # type: ignore[operator]
            raise InvalidArgument(f"range lo {lo!r} is greater than hi {hi!r}")
        object.__setattr__(self, "_test", test)

    def matches(self, v: Value) -> bool:
        return self._test(v)


@dataclass(frozen=True, slots=True)
class Prefix:
    """Matches str fields starting with a str ``p``, or bytes fields starting
    with a bytes ``p``. An empty ``p`` matches every str (or bytes)."""

    p: str | bytes
    _test: _Test = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        p = self.p
        test: _Test
        if type(p) is str:
            sp = p

            def test(x: Value) -> bool:
                return type(x) is str and x.startswith(sp)

        elif type(p) is bytes:
            bp = p

            def test(x: Value) -> bool:
                return type(x) is bytes and x.startswith(bp)

        else:
            raise InvalidArgument(f"prefix must be str or bytes, not {type(p).__name__}")
        object.__setattr__(self, "_test", test)

    def matches(self, v: Value) -> bool:
        return self._test(v)


FieldPattern = Actual | Formal | AnyField | Range | Prefix
_PATTERN_CLASSES = (Actual, Formal, AnyField, Range, Prefix)

#: The Python types ``Template.of`` reads as formals.
_NATURAL_FORMALS: dict[object, ValueType] = {t: vt for vt, t in PY_TYPES.items()}


@dataclass(frozen=True, slots=True)
class Template:
    """A list of field patterns; matches tuples of the same arity whose every
    field matches. A template with no fields matches only the empty tuple."""

    fields: tuple[FieldPattern, ...]
    _arity: int = field(init=False, repr=False, compare=False)
    # (position, test) for each position that is not ANY.
    _checks: tuple[tuple[int, _Test], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = self.fields
        if not isinstance(fields, tuple | list):
            raise InvalidArgument(f"template: {type(fields).__name__} is not a tuple or list")
        fields = tuple(fields)
        if len(fields) > MAX_ARITY:
            raise InvalidArgument(f"template has {len(fields)} fields, at most {MAX_ARITY}")
        for i, f in enumerate(fields):
            if not isinstance(f, _PATTERN_CLASSES):
                raise InvalidArgument(
                    f"template[{i}]: {type(f).__name__} is not a field pattern "
                    "(Template.of takes plain values)"
                )
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "_arity", len(fields))
        checks = tuple((i, f._test) for i, f in enumerate(fields) if not isinstance(f, AnyField))
        object.__setattr__(self, "_checks", checks)

    @classmethod
    def of(cls, *natural: object) -> Template:
        """A template from plain Python: the classes ``int``, ``float``,
        ``str``, ``bytes``, ``bool`` and ``type(None)`` (or a ValueType) are
        formals, field patterns stay as they are, any other value is an
        actual: ``Template.of("job", int, ANY, Range(1, 10))``."""
        if len(natural) > MAX_ARITY:
            raise InvalidArgument(f"template has {len(natural)} fields, at most {MAX_ARITY}")
        return cls(tuple(_pattern_of(x, f"template[{i}]") for i, x in enumerate(natural)))

    def matches(self, values: Fields) -> bool:
        """True if ``values`` has this arity and every field matches."""
        if len(values) != self._arity:
            return False
        for i, test in self._checks:  # noqa: SIM110 - all() over a generator allocates
            if not test(values[i]):
                return False
        return True


def _pattern_of(x: object, where: str) -> FieldPattern:
    if isinstance(x, _PATTERN_CLASSES):
        return x
    if isinstance(x, ValueType):
        return Formal(x)
    if isinstance(x, type):
        vt = _NATURAL_FORMALS.get(x)
        if vt is None:
            raise InvalidArgument(f"{where}: {x.__name__} is not a tuple type")
        return Formal(vt)
    return Actual(check_value(x, where))


def template(*natural: object) -> Template:
    """Same as ``Template.of``."""
    return Template.of(*natural)
