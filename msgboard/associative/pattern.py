"""Patterns: what a Take, Read, Browse or selector wants from a queue.

A pattern is an address pattern AND a list of alternative templates (any
one may match; none at all means every tuple, the empty one included) AND a
filter expression (``msgboard.associative.filter``; empty: no filter).

``Pattern.matches`` runs once per candidate message; everything it needs is
worked out at construction (the filter is compiled once), so a call is a
few attribute reads and the compiled tests of the parts that constrain
anything. The filter runs last, on what the address and templates matched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from msgboard.associative.address import ALL, AddressPattern
from msgboard.associative.filter import compile_filter
from msgboard.associative.template import Template
from msgboard.associative.tuples import located
from msgboard.errors import InvalidArgument
from msgboard.message import Fields, Message

__all__ = ["EVERYTHING", "Pattern"]


@dataclass(frozen=True, slots=True)
class Pattern:
    """Address pattern AND (no templates, or any one template) AND filter."""

    address: AddressPattern = ALL
    templates: tuple[Template, ...] = ()
    filter: str = ""
    _address_test: Callable[[str], bool] | None = field(init=False, repr=False, compare=False)
    _template_tests: tuple[Callable[[Fields], bool], ...] = field(
        init=False, repr=False, compare=False
    )
    _filter_test: Callable[[Message], bool] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.address, AddressPattern):
            raise InvalidArgument(
                f"pattern.address: {type(self.address).__name__} is not an AddressPattern"
            )
        templates = self.templates
        if not isinstance(templates, tuple | list):
            raise InvalidArgument(
                f"pattern.templates: {type(templates).__name__} is not a tuple or list"
            )
        templates = tuple(templates)
        for i, t in enumerate(templates):
            if not isinstance(t, Template):
                raise InvalidArgument(
                    f"pattern.templates[{i}]: {type(t).__name__} is not a Template"
                )
        object.__setattr__(self, "templates", templates)
        if not isinstance(self.filter, str):
            raise InvalidArgument(f"pattern.filter: {type(self.filter).__name__} is not a string")
        with located("pattern.filter"):
            test = compile_filter(self.filter).matches if self.filter else None
        address = self.address
        object.__setattr__(self, "_address_test", None if address.matches_all else address.matches)
        object.__setattr__(self, "_template_tests", tuple(t.matches for t in templates))
        object.__setattr__(self, "_filter_test", test)

    @property
    def matches_all(self) -> bool:
        """True if every message matches."""
        return self._address_test is None and not self._template_tests and self._filter_test is None

    def matches(self, msg: Message) -> bool:
        """True if ``msg``'s address and tuple match, then its filter."""
        # Inlined matches_parts: this is the per-candidate hot path.
        test = self._address_test
        if test is not None and not test(msg.address):
            return False
        tests = self._template_tests
        if tests:
            fields = msg.tuple
            for t in tests:
                if t(fields):
                    break
            else:
                return False
        f = self._filter_test
        return f is None or f(msg)

    def filter_matches(self, msg: Message) -> bool:
        """True if ``msg`` passes the filter alone (or there is none)."""
        f = self._filter_test
        return f is None or f(msg)

    def matches_parts(self, address: str, fields: Fields) -> bool:
        """The address and templates of ``matches``, for a message not (yet)
        built. The filter is not run: it reads the whole envelope, so a
        caller checks ``filter_matches`` once the message exists."""
        test = self._address_test
        if test is not None and not test(address):
            return False
        tests = self._template_tests
        if not tests:
            return True
        for t in tests:  # noqa: SIM110 - any() over a generator costs an allocation
            if t(fields):
                return True
        return False


#: The pattern that matches every message.
EVERYTHING = Pattern()
