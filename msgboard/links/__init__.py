"""Links between boards (issue 27): the Channel design's connectors.

A *link* is a durable, named connection from this board to another, kept
in the store and reconnecting by itself (``link.py``); a *crossing
selector* moves or copies into a queue on a linked board, its messages
waiting in an outbox here until the remote queue has room, each keyed by
its origin so that it arrives exactly once (``forwarder.py``); ``Links``
(``registry.py``) runs them all for one board. The remote board sees a
link as an ordinary user: its permissions there are the link's *filter*.
docs/links.md tells the whole story.

Layer: between the server and the engine. It may import the engine, the
store, the shared vocabulary, ``v1`` and the Python client (a link is a
client of the remote board); the server imports it; the engine, the
store, the client, security and the cluster never import it.
"""

from __future__ import annotations

from msgboard.links.forwarder import Forwarder, key_of
from msgboard.links.link import Link
from msgboard.links.registry import Links
from msgboard.links.translate import (
    IDENTITY,
    Origin,
    Translator,
    compile_translator,
    selector_translator,
)

__all__ = [
    "IDENTITY",
    "Forwarder",
    "Link",
    "Links",
    "Origin",
    "Translator",
    "compile_translator",
    "key_of",
    "selector_translator",
]
