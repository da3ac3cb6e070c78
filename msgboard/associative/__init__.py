"""Associative matching: tuples, templates, address patterns and patterns.

Everything a reader can ask of a message's address and tuple, and the typed
equality behind it, with no I/O and no protobuf: ``msgboard.codec`` converts
these types to and from the wire, and the engine indexes and runs them.
"""

from __future__ import annotations

from msgboard.associative.address import ALL, AddressPattern
from msgboard.associative.notation import (
    fields_to_json,
    parse_address,
    parse_template,
    parse_tuple,
    template_to_json,
)
from msgboard.associative.pattern import EVERYTHING, Pattern
from msgboard.associative.template import (
    ANY,
    Actual,
    AnyField,
    FieldPattern,
    Formal,
    Prefix,
    Range,
    Template,
    template,
)
from msgboard.associative.tuples import (
    MAX_ARITY,
    ValueType,
    check_fields,
    check_value,
    same_value,
    type_of,
)

__all__ = [
    "ALL",
    "ANY",
    "EVERYTHING",
    "MAX_ARITY",
    "Actual",
    "AddressPattern",
    "AnyField",
    "FieldPattern",
    "Formal",
    "Pattern",
    "Prefix",
    "Range",
    "Template",
    "ValueType",
    "check_fields",
    "check_value",
    "fields_to_json",
    "parse_address",
    "parse_template",
    "parse_tuple",
    "same_value",
    "template",
    "template_to_json",
    "type_of",
]
