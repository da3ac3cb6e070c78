"""Filters: JMS message selectors (SQL-92 conditions), compiled once.

``compile_filter(text)`` parses a filter and compiles it into a tree of
closures (``parse``); ``Filter.matches(msg)`` runs them on one message
(``evaluate``, with the run-time operators). Nothing is ever ``eval``-ed.
The grammar, by binding power (loosest first)::

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

from msgboard.associative.filter.evaluate import FIELDS, Filter
from msgboard.associative.filter.parse import MAX_DEPTH, Parser
from msgboard.associative.like import MAX_LIKE_CHARS
from msgboard.errors import InvalidArgument

__all__ = ["FIELDS", "MAX_DEPTH", "MAX_FILTER_CHARS", "MAX_LIKE_CHARS", "Filter", "compile_filter"]

#: The longest filter, in characters.
MAX_FILTER_CHARS = 4096


def compile_filter(text: str) -> Filter:
    """Parses and compiles ``text``; InvalidArgument saying what is wrong and
    at which column, with the text and a caret under the place."""
    if not isinstance(text, str):
        raise InvalidArgument(f"a filter is a string, not {type(text).__name__}")
    if len(text) > MAX_FILTER_CHARS:
        raise InvalidArgument(f"filter of {len(text)} characters, at most {MAX_FILTER_CHARS}")
    parser = Parser(text)
    test = parser.parse()
    return Filter(text, test, tuple(parser.bare))
