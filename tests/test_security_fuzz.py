"""A filter's LIKE costs at most linear time in the message, whatever the
pattern (RabbitMQ's SQL LIKE filter let one pattern take 100-200 ms of CPU
per message, CVE-2026-67240).

Counted, not timed: the value is a ``str`` whose ``find`` and
``startswith`` (all that ``msgboard.associative.like`` uses on a pattern of
literals and ``%``) add up the characters they pass over. Given long values
and patterns with many ``%``, I expect that count to stay within twice the
value's length plus the pattern's, where a backtracking matcher needs
(value length) ** (number of %).
"""

from __future__ import annotations

from typing import Any, SupportsIndex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgboard.associative.filter import compile_filter
from msgboard.associative.like import MAX_LIKE_CHARS, compile_like
from msgboard.errors import InvalidArgument


class Counted(str):
    """A string that counts the characters its searches pass over."""

    steps = 0

    def find(  # type: ignore[override]
        self, sub: str, start: SupportsIndex | None = None, end: SupportsIndex | None = None
    ) -> int:
        lo = 0 if start is None else int(start)
        hi = len(self) if end is None else int(end)
        at = super().find(sub, lo, hi)
        Counted.steps += (at - lo + len(sub)) if at >= 0 else max(0, hi - lo)
        return at

    def startswith(self, prefix: Any, start: SupportsIndex | None = None, *rest: Any) -> bool:
        Counted.steps += len(prefix) if isinstance(prefix, str) else 1
        return super().startswith(prefix, start, *rest)


def _steps(test: Any, value: str) -> tuple[bool, int]:
    Counted.steps = 0
    got = test(Counted(value))
    return got, Counted.steps


#: Values over a small alphabet, so that the pattern's pieces occur often.
values = st.text(alphabet="ab", min_size=1_000, max_size=20_000)
#: Patterns of many %-separated pieces of that alphabet.
pieces = st.lists(st.text(alphabet="ab", max_size=4), min_size=2, max_size=60)


@settings(max_examples=60, deadline=None)
@given(values, pieces)
def test_like_passes_over_a_value_at_most_twice(value: str, parts: list[str]) -> None:
    pattern = "%".join(parts)[:MAX_LIKE_CHARS]
    _, steps = _steps(compile_like(pattern), value)
    assert steps <= 2 * len(value) + len(pattern)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=10_000, max_value=200_000), st.integers(min_value=2, max_value=120))
def test_the_worst_case_shape_is_linear(n: int, k: int) -> None:
    # '%a%a%a...%b%c' against 'aaaa...ac': a backtracking matcher tries
    # every way to place k a's (n choose k) before giving up.
    pattern = "%" + "a%" * k + "b%c"
    ok, steps = _steps(compile_like(pattern), "a" * n + "c")
    assert not ok
    assert n <= steps <= 2 * n + len(pattern)


def test_the_pattern_is_bounded_so_the_bound_is_linear_in_the_message() -> None:
    # The bound above grows with the pattern; filters cap it, so per message
    # it is linear in the message alone.
    compile_filter("address LIKE '" + "%a" * (MAX_LIKE_CHARS // 2) + "'")
    with pytest.raises(InvalidArgument, match="LIKE pattern of"):
        compile_filter("address LIKE '" + "%a" * (MAX_LIKE_CHARS // 2 + 1) + "'")
