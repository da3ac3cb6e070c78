"""Tuples: ordered typed fields, and the typed equality that matching uses.

A tuple field is null, bool, int (64-bit), float (64-bit), str or bytes. The
semantics are canonical and language-neutral, so that a Go or Java client
matches exactly what Python matches: the type is part of the value (``True``
is not ``1``, ``1`` is not ``1.0``), null is a value equal only to itself,
and every NaN is one value equal to itself. Python's own ``==`` gets all
three wrong, so matching code compares with ``same_value``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager

from msgboard.errors import InvalidArgument
from msgboard.message import Fields, Value

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_ARITY",
    "ValueType",
    "check_fields",
    "check_value",
    "located",
    "same_value",
    "type_of",
    "value_hash",
]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Most fields in a tuple or template.
MAX_ARITY = 64

_TYPE_NAMES = "null, bool, int, float, str, bytes"


class ValueType(enum.Enum):
    """The six field types; the value is the name the text notation uses."""

    NULL = "null"
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STRING = "str"
    BYTES = "bytes"

    @property
    def pytype(self) -> type:
        """The Python class of values of this type (exact, not a base)."""
        return PY_TYPES[self]


#: ValueType -> the exact Python class of its values.
PY_TYPES: dict[ValueType, type] = {
    ValueType.NULL: type(None),
    ValueType.BOOL: bool,
    ValueType.INT: int,
    ValueType.FLOAT: float,
    ValueType.STRING: str,
    ValueType.BYTES: bytes,
}
# Exact classes only: a str or int subclass (an IntEnum, say) is not a field.
_BY_PYTYPE: dict[type, ValueType] = {t: vt for vt, t in PY_TYPES.items()}


def type_of(v: object) -> ValueType:
    """The field type of ``v``; InvalidArgument if ``v`` is not a tuple value."""
    try:
        return _BY_PYTYPE[type(v)]
    except KeyError:
        raise InvalidArgument(f"{type(v).__name__} is not a tuple type ({_TYPE_NAMES})") from None


def check_value(v: object, where: str = "value") -> Value:
    """``v`` if it is a valid field value, else InvalidArgument naming ``where``."""
    t = type(v)
    if t is int:
        if not INT64_MIN <= v <= INT64_MAX:  # type: ignore[operator]
            raise InvalidArgument(f"{where}: integer {v} does not fit in 64 bits")
    elif t not in _BY_PYTYPE:
        raise InvalidArgument(f"{where}: {t.__name__} is not a tuple type ({_TYPE_NAMES})")
    return v  # type: ignore[return-value]


def check_fields(fields: object, max_arity: int = MAX_ARITY, where: str = "tuple") -> Fields:
    """Validates a tuple (a Python tuple or list of field values) and returns
    it as a tuple; InvalidArgument names the offending position."""
    if not isinstance(fields, tuple | list):
        raise InvalidArgument(f"{where}: {type(fields).__name__} is not a tuple or list")
    if len(fields) > max_arity:
        raise InvalidArgument(f"{where}: {len(fields)} fields, at most {max_arity}")
    for i, v in enumerate(fields):
        check_value(v, f"{where}[{i}]")
    return tuple(fields)


def same_value(a: Value, b: Value) -> bool:
    """Typed equality: same type and same value; all NaNs are one value."""
    t = type(a)
    if t is not type(b):
        return False
    if t is float:
        # a != a only for NaN; -0.0 == 0.0 already holds.
        return a == b or (a != a and b != b)
    return a == b


def value_hash(v: Value) -> int:
    """A hash consistent with ``same_value`` (hash(nan) differs per object)."""
    if type(v) is float and v != v:
        return hash((float, "nan"))
    return hash((type(v), v))


@contextmanager
def located(where: str) -> Iterator[None]:
    """Prefixes the message of an InvalidArgument raised inside with ``where``,
    for constructors that cannot know the path of what they build."""
    try:
        yield
    except InvalidArgument as e:
        raise InvalidArgument(f"{where}: {e}") from None
