"""Links between boards: the Channel design's connectors.

A link is a durable, authenticated connection from this board to another
(a client of the remote board); selectors cross it (push ``--to
LINK:QUEUE``, pull ``LINK:QUEUE --to LOCAL``), each with a translator at
the link's interface (``translate``). This layer sits between the server
and the engine: it may import the engine, the store, the shared
vocabulary, ``v1`` and the Python client; the server imports it; the
engine, store, client, security and cluster never import it.
"""

from __future__ import annotations

from msgboard.links.translate import (
    IDENTITY,
    Origin,
    Translator,
    compile_translator,
    selector_translator,
)

__all__ = ["IDENTITY", "Origin", "Translator", "compile_translator", "selector_translator"]
