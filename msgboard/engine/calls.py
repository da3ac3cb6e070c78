"""The two forms of a board call, and the parts that serve them.

Every call of the board comes in two forms. ``x_async(...)`` checks its
arguments on the caller's thread, hands an operation to the writer thread
(``writer.py``) and returns a ``concurrent.futures.Future``, answered once
the operation is durable: the server calls these. ``x(...)`` takes the same
arguments and waits for that answer (or raises its error): a program that
embeds the board calls these. The waiting form is made from the async one
by ``waits``, so the two never differ; the docstring is the async form's.
Never call a waiting form on the writer thread (from inside an
operation): it would wait for itself.

``Board`` is the face of parts that own their calls (``Subscriptions``,
``Browsing``, ...): ``served_by`` declares a call on the board that one of
its parts serves, so that the board keeps every public method while the
part keeps the code, its signature and its docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from functools import update_wrapper
from operator import attrgetter
from typing import Any, Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def waits(fn: Callable[P, Future[R]]) -> Callable[P, R]:
    """The waiting form of the async call ``fn`` (named ``x_async``): ``x``,
    with the same parameters, returning what ``fn``'s future answers."""

    def wait(*args: P.args, **kwargs: P.kwargs) -> R:
        return fn(*args, **kwargs).result()

    name = fn.__name__.removesuffix("_async")
    wait.__name__ = name
    wait.__qualname__ = f"{fn.__qualname__.rpartition('.')[0]}.{name}".lstrip(".")
    wait.__doc__ = f"Waits for ``{fn.__name__}``: {fn.__doc__ or ''}"
    wait.__wrapped__ = fn  # type: ignore[attr-defined]
    return wait


def served_by(part: str, fn: Callable[Concatenate[T, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A method of the board served by its part in attribute ``part``:
    ``fn``, a method of that part's class, called on it."""
    get = attrgetter(part)

    def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return fn(get(self), *args, **kwargs)

    return update_wrapper(call, fn)
