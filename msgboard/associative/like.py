"""SQL ``LIKE`` patterns, matched without backtracking.

``_`` matches exactly one character, ``%`` any run of characters (none
included), and an escape character, when given, makes the next ``_``, ``%``
or itself literal. The pattern is split at its ``%`` runs into fixed-length
segments; the first segment is anchored at the start of the value, the last
at its end, and each middle one is placed at its leftmost occurrence after
the previous one. Leftmost placement is always safe because segments have
fixed lengths: an earlier place never leaves less room for what follows.

A segment without ``_`` is found with ``str.find``; one with ``_`` with a
regex made only of literals and ``.``, which has no quantifier to backtrack
over. So a value of length n costs at most O(n) per plain segment and
O(n x segment length) per ``_`` segment, whatever the pattern: the
translation ``%a%a%a…b`` -> ``.*a.*a.*a…b`` that makes a backtracking regex
take exponential time is never built.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from msgboard.errors import InvalidArgument

__all__ = ["MAX_LIKE_CHARS", "compile_like"]

#: The longest LIKE pattern, in characters (escapes counted).
MAX_LIKE_CHARS = 256

#: Stands for ``_`` inside a parsed segment.
_ONE = None

Segment = list[str | None]


def parse_like(pattern: str, escape: str | None = None) -> list[Segment]:
    """The ``%``-separated segments of ``pattern``: lists of literal
    characters and ``None`` for ``_``. InvalidArgument for a dangling or
    misused escape, or a pattern over the length bound."""
    if len(pattern) > MAX_LIKE_CHARS:
        raise InvalidArgument(
            f"LIKE pattern of {len(pattern)} characters, at most {MAX_LIKE_CHARS}"
        )
    if escape is not None and len(escape) != 1:
        raise InvalidArgument(f"ESCAPE must be one character, not {len(escape)}")
    segments: list[Segment] = [[]]
    in_run = False  # the last thing seen was a %: a run of them is one
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == escape:
            c = pattern[i : i + 1]
            if not c or c not in ("%", "_", escape):
                raise InvalidArgument(
                    f"LIKE pattern: the escape {escape!r} at character {i} must be "
                    f"followed by %, _ or itself"
                )
            i += 1
            segments[-1].append(c)
        elif c == "%":
            if not in_run:
                segments.append([])
            in_run = True
            continue
        else:
            segments[-1].append(_ONE if c == "_" else c)
        in_run = False
    return segments


class _Seg:
    """One fixed-length segment: where it occurs, and whether it fits."""

    __slots__ = ("find", "length", "match")

    def __init__(self, items: Segment) -> None:
        self.length = len(items)
        if _ONE not in items:
            lit = "".join(c for c in items if c is not None)
            self.find: Callable[[str, int, int], int] = lambda s, lo, hi: s.find(lit, lo, hi)
            self.match: Callable[[str, int], bool] = lambda s, at: s.startswith(lit, at)
        else:
            rx = re.compile("".join("." if c is None else re.escape(c) for c in items), re.DOTALL)

            def find(s: str, lo: int, hi: int) -> int:
                m = rx.search(s, lo, hi)
                return -1 if m is None else m.start()

            self.find = find
            self.match = lambda s, at: rx.match(s, at) is not None


def compile_like(pattern: str, escape: str | None = None) -> Callable[[str], bool]:
    """A test of whether a string matches the LIKE ``pattern``."""
    parts = parse_like(pattern, escape)
    if len(parts) == 1:  # no %: the whole value, exactly
        only = _Seg(parts[0])
        size = only.length
        return lambda s: len(s) == size and only.match(s, 0)
    head, tail = _Seg(parts[0]), _Seg(parts[-1])
    middle = [_Seg(p) for p in parts[1:-1]]

    def like(s: str) -> bool:
        end = len(s) - tail.length
        if end < head.length or not head.match(s, 0) or not tail.match(s, end):
            return False
        pos = head.length
        for seg in middle:
            at = seg.find(s, pos, end)
            if at < 0:
                return False
            pos = at + seg.length
        return True

    return like
