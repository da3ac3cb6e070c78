"""The Python client's notation for patterns: a template is a tuple in
which a type (``int``, ``str`` …) is a formal, ``ANY`` matches anything,
``Range`` and ``Prefix`` are patterns and anything else is an actual value;
a list of templates is a set of alternatives; an address pattern is a
string in the CLI notation (``"topic:rec.pets.*"``). Shared by the client's
data calls (``msgboard.client``) and its admin calls (``msgboard.client.admin``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from msgboard.associative import ALL, AddressPattern, Pattern, Template, parse_address, template
from msgboard.associative.template import Actual
from msgboard.spec import Position

TemplateLike = Template | tuple[Any, ...]
Templates = TemplateLike | Sequence[TemplateLike] | None


class NotationWarning(UserWarning):
    """A template field is a string that spells a pattern of the CLI's
    notation (``"?int"``, ``"?"``): in Python it is that literal string,
    which is most likely not what was meant. ``warnings.filterwarnings(
    "error", category=NotationWarning)`` makes it an error; ``{"value":
    ...}`` is not needed in Python, so a literal ``"?int"`` is written as
    it is, with the warning filtered out (``"ignore"``)."""


#: The CLI's spellings and what Python writes for each (docs/clients.md).
CLI_FORMALS = {
    "?": "ANY",
    "?int": "int",
    "?float": "float",
    "?str": "str",
    "?bytes": "bytes",
    "?bool": "bool",
    "?null": "type(None)",
}


def _warn_notation(alts: tuple[Template, ...]) -> None:
    for t in alts:
        for i, f in enumerate(t.fields):
            if isinstance(f, Actual) and isinstance(f.value, str) and f.value in CLI_FORMALS:
                warnings.warn(
                    f"template field {i} is the string {f.value!r}, the CLI's spelling of a "
                    f"pattern; in Python that pattern is {CLI_FORMALS[f.value]} (the string "
                    "matches only itself)",
                    NotationWarning,
                    stacklevel=4,
                )


def make_pattern(
    templates: Templates = None, address: str | AddressPattern | None = None, filter: str = ""
) -> Pattern:
    """A Pattern from the client's natural notation; ``filter`` is a JMS-style
    selector expression (docs/concepts.md, Filters)."""
    if templates is None:
        alts: tuple[Template, ...] = ()
    elif isinstance(templates, Template):
        alts = (templates,)
    elif isinstance(templates, tuple):
        alts = (template(*templates),)
    else:
        alts = tuple(t if isinstance(t, Template) else template(*t) for t in templates)
    _warn_notation(alts)
    if address is None:
        addr = ALL
    elif isinstance(address, AddressPattern):
        addr = address
    else:
        addr = parse_address(address)
    return Pattern(address=addr, templates=alts, filter=filter)


def start_position(start: Position | str | int) -> tuple[Position, int]:
    """A start position from ``Position``, a name or a seq number."""
    if isinstance(start, int):
        return Position.SEQ, start
    return Position(start), 0
