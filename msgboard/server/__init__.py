"""The server: a thin gRPC shell around the engine (the package's face).

- ``service``: ``BoardService``, ``create_server`` and ``serve``;
- ``streams``: PostStream and Subscribe; ``deliveries`` and ``handoff``: what
  a subscription hands out and how its answers reach the event loop;
- ``reflection`` and ``readiness``: server reflection and the health service;
- ``calls``, ``metrics`` and ``logs``: calls in progress and the access log,
  the Prometheus listener, the log formats;
- ``roles`` and ``standby``: a replicating board's role asked before each
  client call, and ``msgboard serve --standby-of`` (msgboard.cluster is
  loaded only by a board that replicates);
- ``switchboard`` (one server, a pipeline per role) and ``decoding`` (a
  request that is not protobuf refused): interceptors that wrap every
  call's behaviour with ``rewrap``;
- ``gcstress``: ``MSGBOARD_GC_STRESS``, a garbage-collector thread for
  soaks and tests (docs/architecture.md, "What crosses a thread").

It may import everything below it (``engine``, ``security``, the shared
vocabulary); nothing but ``msgboard.testing`` and the CLI imports it.
"""

from __future__ import annotations

from msgboard.server.service import DEFAULT_DATA, DEFAULT_LISTEN, BoardService
from msgboard.server.serving import create_server, serve

__all__ = ["DEFAULT_DATA", "DEFAULT_LISTEN", "BoardService", "create_server", "serve"]
