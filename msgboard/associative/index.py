"""The pattern index: which of many patterns a message matches, without
trying them all.

Blocked Takes and Reads (and selectors) each hold a pattern; when a message
arrives, the board needs the ones it matches, oldest first. A
``PatternIndex`` files each item under one key of its pattern and, for a
message, looks up only the keys the message has, then checks the whole
pattern on those candidates alone::

    index = PatternIndex[str]()
    index.add("w1", Pattern(AddressPattern.topic("rec.pets.*")))
    index.add("w2", Pattern(templates=(template("job", int),)))
    index.match(Message(tuple=("job", 7)))          # ["w2"]

Where an item is filed (its ``route``), first that applies:

1. ``eq``: an eq address (or a topic without wildcards), in a hash table.
2. ``field``: when every alternative template has an actual field, each
   template under one actual, (arity, position, typed value), in a hash
   table: the actual whose bucket is smallest when the item is added.
3. ``topic``: a topic address, in a trie of words with ``*`` and ``#``
   edges; a message's address walks it once, as an NFA, so a lookup costs
   the address's words times the live trie nodes, not the patterns.
4. ``prefix``: a prefix address, in a hash table per prefix length.
5. ``shape``/``arity``: each template by its arity and field types when
   every field fixes a type, else by its arity alone.
6. ``all``: a pattern that constrains neither address nor tuple.

A lookup costs one hash probe per field, the trie walk, one probe per
distinct prefix length, and the candidates it returns; items filed
elsewhere are never touched. Everything runs on one thread (the board's
writer); it is not thread-safe.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from msgboard.associative.address import AddressPattern
from msgboard.associative.keys import topic_words
from msgboard.associative.pattern import Pattern
from msgboard.associative.template import Actual, Formal, Template
from msgboard.message import Fields, Message, Value

__all__ = ["ROUTES", "PatternIndex"]

T = TypeVar("T", bound=Hashable)
#: An item -> the order it was added in.
_Bucket = dict[Any, int]

ROUTES = ("eq", "field", "topic", "prefix", "shape", "arity", "all")


def _value(v: Value) -> tuple[type, object]:
    """A hashable key with typed equality (1, 1.0 and True differ; NaN = NaN)."""
    if type(v) is float and v != v:
        return (float, "nan")
    return (type(v), v)


class _Node:
    """A topic trie node: the patterns ending here, and edges by word."""

    __slots__ = ("hash", "items", "loop", "star", "words")

    def __init__(self, loop: bool = False) -> None:
        self.words: dict[str, _Node] = {}
        self.star: _Node | None = None
        self.hash: _Node | None = None
        self.items: _Bucket = {}
        #: Reached through "#": takes any further word and stays here.
        self.loop = loop

    def empty(self) -> bool:
        return not (self.items or self.words or self.star or self.hash)


def _closure(states: set[_Node]) -> set[_Node]:
    """Adds the nodes reached through "#" edges matching no word."""
    stack = list(states)
    while stack:
        h = stack.pop().hash
        if h is not None and h not in states:
            states.add(h)
            stack.append(h)
    return states


class _Trie:
    def __init__(self) -> None:
        self.root = _Node()
        self.size = 0

    def add(self, words: list[str], item: object, order: int) -> Callable[[], None]:
        """Files ``item`` under the pattern ``words``; returns its remover."""
        node, path = self.root, []
        for w in words:
            if w == "*":
                child = node.star = node.star or _Node()
            elif w == "#":
                child = node.hash = node.hash or _Node(loop=True)
            else:
                child = node.words.get(w) or node.words.setdefault(w, _Node())
            path.append((node, w, child))
            node = child
        node.items[item] = order
        self.size += 1
        leaf = node

        def remove() -> None:
            del leaf.items[item]
            self.size -= 1
            for parent, w, child in reversed(path):  # prune what is left empty
                if not child.empty():
                    break
                if w == "*":
                    parent.star = None
                elif w == "#":
                    parent.hash = None
                else:
                    del parent.words[w]

        return remove

    def match(self, address: str, out: _Bucket) -> None:
        states = _closure({self.root})
        for w in address.split(".") if address else ():
            nxt = set()
            for n in states:
                c = n.words.get(w)
                if c is not None:
                    nxt.add(c)
                if n.star is not None:
                    nxt.add(n.star)
                if n.loop:
                    nxt.add(n)
            if not nxt:
                return
            states = _closure(nxt)
        for n in states:
            out.update(n.items)


@dataclass(slots=True)
class _Entry:
    pattern: Pattern
    order: int
    route: str
    removers: list[Callable[[], None]] = field(default_factory=list)


class PatternIndex(Generic[T]):
    """Items filed by their patterns, kept in the order they were added."""

    def __init__(self) -> None:
        self._entries: dict[T, _Entry] = {}
        self._order = itertools.count()
        self._eq: dict[str, _Bucket] = {}
        self._fields: dict[tuple[int, int, tuple[type, object]], _Bucket] = {}
        self._trie = _Trie()
        self._prefixes: dict[int, dict[str, _Bucket]] = {}
        self._shapes: dict[tuple[type, ...], _Bucket] = {}
        self._arities: dict[int, _Bucket] = {}
        self._all: _Bucket = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, item: object) -> bool:
        return item in self._entries

    def __iter__(self) -> Iterator[T]:
        """The items in the order they were added."""
        return iter(self._entries)

    def route(self, item: T) -> str:
        """Where ``item`` is filed: one of ``ROUTES``."""
        return self._entries[item].route

    def add(self, item: T, pattern: Pattern) -> None:
        """Files ``item`` (which must not be filed already) under ``pattern``."""
        if item in self._entries:
            raise ValueError(f"{item!r} is already in the index")
        order = next(self._order)
        e = _Entry(pattern, order, "")
        a = pattern.address
        templates = pattern.templates
        eq = self._eq_text(a)
        if eq is not None:
            e.route = "eq"
            e.removers.append(self._put(self._eq, eq, item, order))
        elif templates and all(_actuals(t) for t in templates):
            e.route = "field"
            for key in dict.fromkeys(self._best_actual(t) for t in templates):
                e.removers.append(self._put(self._fields, key, item, order))
        elif a.kind == "topic" and not a.matches_all:
            e.route = "topic"
            e.removers.append(self._trie.add(topic_words(a.text), item, order))
        elif a.kind == "prefix" and not a.matches_all:
            e.route = "prefix"
            table = self._prefixes.setdefault(len(a.text), {})
            remove = self._put(table, a.text, item, order)

            def remove_prefix(n: int = len(a.text)) -> None:
                remove()
                if not self._prefixes[n]:
                    del self._prefixes[n]

            e.removers.append(remove_prefix)
        elif templates:
            shapes = {_shape(t) for t in templates}
            arities = {len(t.fields) for t in templates if _shape(t) is None}
            for shape in shapes - {None}:
                e.removers.append(self._put(self._shapes, shape, item, order))
            for n in arities:
                e.removers.append(self._put(self._arities, n, item, order))
            e.route = "arity" if arities else "shape"
        else:
            e.route = "all"
            self._all[item] = order
            e.removers.append(lambda: self._all.__delitem__(item))
        self._entries[item] = e

    def remove(self, item: T) -> bool:
        """Takes ``item`` out; False if it was not there."""
        e = self._entries.pop(item, None)
        if e is None:
            return False
        for remove in e.removers:
            remove()
        return True

    def candidates(self, address: str, fields: Fields) -> list[T]:
        """The items filed under a key this address and tuple have, in the
        order they were added: every item whose pattern matches, and maybe
        others (check each with its pattern, or use ``match``)."""
        found: _Bucket = {}
        b = self._eq.get(address)
        if b:
            found.update(b)
        n = len(fields)
        if self._fields:
            get = self._fields.get
            for i, v in enumerate(fields):
                b = get((n, i, _value(v)))
                if b:
                    found.update(b)
        if self._trie.size:
            self._trie.match(address, found)
        for length, table in self._prefixes.items():
            if len(address) >= length:
                b = table.get(address[:length])
                if b:
                    found.update(b)
        if self._shapes:
            b = self._shapes.get(tuple(map(type, fields)))
            if b:
                found.update(b)
        b = self._arities.get(n)
        if b:
            found.update(b)
        found.update(self._all)
        return sorted(found, key=found.__getitem__)

    def match(self, msg: Message) -> list[T]:
        """The items whose pattern matches ``msg``, in the order they were added."""
        entries = self._entries
        found = self.candidates(msg.address, msg.tuple)
        return [i for i in found if entries[i].pattern.matches(msg)]

    # -- filing ------------------------------------------------------------

    @staticmethod
    def _put(
        table: dict[Any, _Bucket], key: object, item: object, order: int
    ) -> Callable[[], None]:
        bucket = table.get(key)
        if bucket is None:
            bucket = table[key] = {}
        bucket[item] = order

        def remove() -> None:
            del bucket[item]
            if not bucket:
                del table[key]

        return remove

    @staticmethod
    def _eq_text(a: AddressPattern) -> str | None:
        """The one address ``a`` matches, if it matches only one."""
        if a.kind == "eq":
            return a.text
        if a.kind == "topic" and not any(w in ("*", "#") for w in topic_words(a.text)):
            return a.text
        return None

    def _best_actual(self, t: Template) -> tuple[int, int, tuple[type, object]]:
        """The key of ``t``'s actual field with the fewest items filed now."""
        n = len(t.fields)
        keys = [(n, i, _value(v)) for i, v in _actuals(t)]
        return min(keys, key=lambda k: len(self._fields.get(k, ())))


def _actuals(t: Template) -> list[tuple[int, Value]]:
    return [(i, f.value) for i, f in enumerate(t.fields) if isinstance(f, Actual)]


def _shape(t: Template) -> tuple[type, ...] | None:
    """The field types ``t`` fixes, if it fixes every one."""
    types = []
    for f in t.fields:
        if isinstance(f, Formal):
            types.append(f.type.pytype)
        elif isinstance(f, Actual):
            types.append(type(f.value))
        else:
            return None
    return tuple(types)
