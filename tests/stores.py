"""Helpers of the store tests (``test_store.py``, the contract on both
backends, and ``test_durable.py``, the LMDB store's own stories)."""

from __future__ import annotations

from collections.abc import Iterator

from msgboard.lmdbstore import Store
from msgboard.message import Message, Section
from msgboard.spec import QueueSpec

U, H = Section.UNPROCESSED, Section.HISTORY
S = 1_000_000  # one second in µs


def make(store: Store, name: str = "q", max_history: int = 0) -> None:
    with store.begin() as txn:
        txn.create_queue(QueueSpec(name, max_history=max_history), created_at=1)


def post(store: Store, n: int, name: str = "q", now: int = 10 * S, step: int = 0) -> list[Message]:
    with store.begin() as txn:
        return [txn.append(name, Message(tuple=(i,)), now + i * step) for i in range(n)]


def seqs(msgs: Iterator[Message] | list[Message]) -> list[int]:
    return [m.seq for m in msgs]
