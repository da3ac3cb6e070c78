"""The Python client: ``Client(address)`` over gRPC, and what its calls take
and return (the package's face; the modules below it are its parts).

- ``client``: ``Client``, the data calls (post, take, read, browse, subscribe);
- ``admin``: ``Admin``, its base: queues, selectors, consumers, stats, snapshots;
- ``publisher``: ``Publisher``, batched streamed posting;
- ``subscription``: ``Subscription`` and ``AsyncSubscription``, credit-paced streams;
- ``patterns``: the Python notation for templates and address patterns;
- ``wire``: what the client reads back from the wire (errors, views).

It may import the shared vocabulary (``msgboard.message``, ``spec``,
``errors``, ``results``, ``codec``, ``tls``), ``associative`` and the
generated ``v1``; never the engine, the store or the server.
"""

from __future__ import annotations

from msgboard.associative import ALL, ANY, Prefix, Range, Template
from msgboard.client.admin import Snapshot
from msgboard.client.client import DEFAULT_SERVER, Client
from msgboard.client.patterns import NotationWarning, TemplateLike, Templates, make_pattern
from msgboard.client.publisher import Publisher
from msgboard.client.subscription import AsyncSubscription, Subscription
from msgboard.message import Message
from msgboard.results import (
    Acked,
    BoardStats,
    ConsumerView,
    LeaseView,
    LinkView,
    Moved,
    Page,
    Purged,
    QueueStats,
    QueueView,
    SelectorView,
    Start,
    StoreInfo,
)
from msgboard.spec import (
    Delivery,
    Disposition,
    Op,
    OverflowPolicy,
    Position,
    QueueSpec,
    Receipt,
    Redelivery,
    Role,
    SelectorSpec,
    UnmatchedPolicy,
)

__all__ = [
    "ALL",
    "ANY",
    "DEFAULT_SERVER",
    "Acked",
    "AsyncSubscription",
    "BoardStats",
    "Client",
    "ConsumerView",
    "Delivery",
    "Disposition",
    "LeaseView",
    "LinkView",
    "Message",
    "Moved",
    "NotationWarning",
    "Op",
    "OverflowPolicy",
    "Page",
    "Position",
    "Prefix",
    "Publisher",
    "Purged",
    "QueueSpec",
    "QueueStats",
    "QueueView",
    "Range",
    "Receipt",
    "Redelivery",
    "Role",
    "SelectorSpec",
    "SelectorView",
    "Snapshot",
    "Start",
    "StoreInfo",
    "Subscription",
    "Template",
    "TemplateLike",
    "Templates",
    "UnmatchedPolicy",
    "make_pattern",
]
