"""The Python client's notation for patterns: a template is a tuple in
which a type (``int``, ``str`` …) is a formal, ``ANY`` matches anything,
``Range`` and ``Prefix`` are patterns and anything else is an actual value;
a list of templates is a set of alternatives; an address pattern is a
string in the CLI notation (``"topic:rec.pets.*"``). Shared by the client's
data calls (``msgboard.client``) and its admin calls (``msgboard.client.admin``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgboard.associative import ALL, AddressPattern, Pattern, Template, parse_address, template
from msgboard.spec import Position

TemplateLike = Template | tuple[Any, ...]
Templates = TemplateLike | Sequence[TemplateLike] | None


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
