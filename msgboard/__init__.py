"""msgboard: a persistent tuple-space message board (gRPC over LMDB).

Layers, top to bottom, each a folder (docs/architecture.md draws them):
``msgboard.cli`` (the command) and ``msgboard.client`` (the Python client,
gRPC only); ``msgboard.server`` (the gRPC shell) and ``msgboard.security``
(identities, the permission table, the interceptor); ``msgboard.engine``
(queues, selectors, routing, credit, group commit; embeddable, no gRPC);
``msgboard.lmdbstore`` (the store contract, LMDB and memory);
``msgboard.associative`` (tuples, templates, address patterns, filters).
The modules at this level are the shared vocabulary every layer speaks:
message, spec, errors, results, codec, details, config, tls.
"""

from __future__ import annotations

from msgboard.message import Message, Section, Value
from msgboard.spec import OverflowPolicy, QueueSpec

__all__ = ["Message", "OverflowPolicy", "QueueSpec", "Section", "Value"]
__version__ = "0.1.0"
