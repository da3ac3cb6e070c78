"""Stories of the pattern index: many patterns, one message, and only the
patterns the message can match are looked at."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgboard.associative import ANY, AddressPattern, Pattern, Range, template
from msgboard.associative.index import PatternIndex
from msgboard.message import Message
from tests.strategies import addresses, patterns, tuples


@settings(max_examples=400, database=None, deadline=None)
@given(
    st.lists(patterns(), min_size=1, max_size=12),
    st.sets(st.integers(0, 11)),
    st.lists(st.tuples(addresses, tuples), min_size=1, max_size=8),
)
def test_match_returns_exactly_what_trying_every_pattern_returns(
    pats: list[Pattern], removed: set[int], msgs: list[tuple[str, tuple[object, ...]]]
) -> None:
    """Given random patterns, some removed again, when random messages
    arrive, I expect exactly the live patterns that match, in the order they
    were added; and, once all are removed, an empty index."""
    index: PatternIndex[int] = PatternIndex()
    for i, p in enumerate(pats):
        index.add(i, p)
    for i in removed:
        index.remove(i)
    live = [i for i in range(len(pats)) if i not in removed]
    assert list(index) == live and len(index) == len(live)
    for address, fields in msgs:
        m = Message(tuple=fields, address=address)  # type: ignore[arg-type]
        assert index.match(m) == [i for i in live if pats[i].matches(m)]
    for i in live:
        assert index.remove(i)
    assert not index.remove(0)
    assert index._trie.root.empty() and index._trie.size == 0
    assert not (index._eq or index._fields or index._prefixes or index._shapes)
    assert not (index._arities or index._all)


def test_each_pattern_is_filed_under_its_most_useful_key() -> None:
    """Given one pattern of each kind, I expect each filed where the module
    docstring says."""
    index: PatternIndex[str] = PatternIndex()
    cases = {
        "eq": Pattern(AddressPattern.eq("a.b"), (template("job", int),)),
        "eq topic": Pattern(AddressPattern.topic("a.b")),
        "field": Pattern(AddressPattern.topic("a.*"), (template("job", int), template(1, ANY))),
        "topic": Pattern(AddressPattern.topic("#.b"), (template(str, int),)),
        "prefix": Pattern(AddressPattern.prefix("a.")),
        "shape": Pattern(templates=(template(str, int),)),
        "arity": Pattern(templates=(template(str, int), template(Range(1, 2)))),
        "all": Pattern(AddressPattern.topic("#")),
    }
    for name, p in cases.items():
        index.add(name, p)
    assert {name: index.route(name) for name in cases} == {
        "eq": "eq",
        "eq topic": "eq",
        "field": "field",
        "topic": "topic",
        "prefix": "prefix",
        "shape": "shape",
        "arity": "arity",
        "all": "all",
    }
    with pytest.raises(ValueError, match="already"):
        index.add("eq", Pattern())


def test_a_message_looks_only_at_its_candidates() -> None:
    """Given 10,000 patterns (eq addresses, topics, actual fields), when a
    message arrives, I expect only the few patterns filed under its keys as
    candidates, oldest first."""
    index: PatternIndex[int] = PatternIndex()
    for i in range(2_500):
        index.add(4 * i, Pattern(AddressPattern.eq(f"orders.{i}")))
        index.add(4 * i + 1, Pattern(AddressPattern.topic(f"orders.{i}.#")))
        index.add(4 * i + 2, Pattern(AddressPattern.topic(f"*.{i}")))
        index.add(4 * i + 3, Pattern(templates=(template("job", i, ANY),)))
    m = Message(tuple=("job", 7, "x"), address="orders.7")
    # The first ("job", 0, ANY) had only empty buckets to choose from: the
    # first actual, "job", where every ("job", ...) message finds it.
    assert index.candidates(m.address, m.tuple) == [3, 28, 29, 30, 31]
    assert index.match(m) == [28, 29, 30, 31]
    assert index.match(Message(address="orders.7.x")) == [29]


def test_the_field_key_is_the_actual_with_fewest_items() -> None:
    """Given many patterns on ("job", i), when one wants ("job", 5), I expect
    it filed under the 5, not under the common "job"."""
    index: PatternIndex[int] = PatternIndex()
    for i in range(100):
        index.add(i, Pattern(templates=(template("job", ANY),)))
    index.add(100, Pattern(templates=(template("job", 5),)))
    assert index._fields[(2, 1, (int, 5))] == {100: 100}
    assert index.match(Message(tuple=("job", 5)))[-1] == 100
