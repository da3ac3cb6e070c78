"""Address patterns: which message addresses a reader wants.

Four kinds: ``all``; ``eq`` (exactly this address); ``prefix`` (addresses
starting with the text); and ``topic``, the AMQP topic-exchange language:
the address and the pattern are dot-separated words, ``*`` matches exactly
one word and ``#`` zero or more. The empty address has no words, so only a
pattern that can match zero words (``#``, or the empty pattern) matches it;
``"a..b"`` has an empty middle word, which ``*`` matches.

A topic pattern compiles to a bit-parallel NFA: bit ``i`` of an int says
"the first ``i`` pattern words have matched the address so far", and each
address word moves every bit at once. Matching is linear in the address
whatever the pattern, where a translated regex would backtrack
exponentially on patterns like ``#.#.#.#.x``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from msgboard.errors import InvalidArgument

__all__ = ["ALL", "KINDS", "MAX_ADDRESS_BYTES", "AddressPattern"]

KINDS = ("all", "eq", "topic", "prefix")
#: Longest eq/topic/prefix text, as the proto bounds addresses.
MAX_ADDRESS_BYTES = 1024


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """One address pattern; build with ``ALL``, ``AddressPattern.eq(s)``,
    ``.topic(s)`` or ``.prefix(s)``."""

    kind: str = "all"
    text: str = ""
    # None for a pattern that matches every address, so callers can skip it.
    _test: Callable[[str], bool] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        kind, text = self.kind, self.text
        if kind not in KINDS:
            raise InvalidArgument(f"address pattern kind {kind!r} is not one of {', '.join(KINDS)}")
        if type(text) is not str:
            raise InvalidArgument(f"{kind} address pattern text must be str")
        if len(text.encode("utf-8", "surrogatepass")) > MAX_ADDRESS_BYTES:
            raise InvalidArgument(f"{kind} address pattern is over {MAX_ADDRESS_BYTES} bytes")
        test: Callable[[str], bool] | None
        if kind == "all":
            if text:
                raise InvalidArgument("the all address pattern takes no text")
            test = None
        elif kind == "eq":
            test = text.__eq__
        elif kind == "prefix":
            test = None if not text else _prefix_test(text)
        else:
            test = _compile_topic(text)
        object.__setattr__(self, "_test", test)

    @classmethod
    def eq(cls, text: str) -> AddressPattern:
        """Exactly this address."""
        return cls("eq", text)

    @classmethod
    def topic(cls, text: str) -> AddressPattern:
        """Dot-separated words with ``*`` (one word) and ``#`` (zero or more)."""
        return cls("topic", text)

    @classmethod
    def prefix(cls, text: str) -> AddressPattern:
        """Addresses starting with ``text``."""
        return cls("prefix", text)

    @property
    def matches_all(self) -> bool:
        """True if every address matches (``all``, ``#``, an empty prefix)."""
        return self._test is None

    def matches(self, address: str) -> bool:
        test = self._test
        return test is None or test(address)

    def __str__(self) -> str:
        """The CLI notation, which ``notation.parse_address`` reads back."""
        return "all" if self.kind == "all" else f"{self.kind}:{self.text}"


ALL = AddressPattern("all")


def _prefix_test(text: str) -> Callable[[str], bool]:
    def test(address: str) -> bool:
        return address.startswith(text)

    return test


def _split(text: str) -> list[str]:
    # The empty string has no words; "a." has two ("a" and "").
    return text.split(".") if text else []


def _compile_topic(text: str) -> Callable[[str], bool] | None:
    words: list[str] = []
    for w in _split(text):
        if w not in ("*", "#") and ("*" in w or "#" in w):
            raise InvalidArgument(
                f"topic word {w!r} mixes a wildcard with other characters; "
                "'*' and '#' must be whole words"
            )
        if w == "#" and words and words[-1] == "#":
            continue  # "#.#" matches what "#" matches
        words.append(w)
    if words == ["#"]:
        return None
    if "*" not in words and "#" not in words:
        return text.__eq__

    hash_mask = star_mask = 0
    literal: dict[str, int] = {}
    for i, w in enumerate(words):
        if w == "#":
            hash_mask |= 1 << i
        elif w == "*":
            star_mask |= 1 << i
        else:
            literal[w] = literal.get(w, 0) | 1 << i
    wild_mask = hash_mask | star_mask
    # Position 0 is live, and so is 1 if word 0 is "#" (it may match nothing).
    start = 1 | (hash_mask & 1) << 1
    accept = 1 << len(words)
    get = literal.get

    def test(address: str) -> bool:
        live = start
        if address:
            for w in address.split("."):
                # Live positions whose pattern word takes this address word.
                m = live & (wild_mask | get(w, 0))
                if not m:
                    return False
                stay = m & hash_mask  # "#" takes the word and stays
                live = (m ^ stay) << 1 | stay
                # A "#" reached may match nothing; no "#.#" is left, so one step.
                live |= (live & hash_mask) << 1
        return live & accept != 0

    return test
