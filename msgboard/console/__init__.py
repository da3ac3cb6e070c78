"""The console: a web page a person runs the board from (the package's face).

Served by the board itself on its HTTP listener (``--metrics-listen``),
beside ``/metrics``, in the board's own asyncio event loop (aiohttp's
``AppRunner``; ``msgboard.server.http`` starts it). Pages are rendered on
the server with Jinja2 (autoescaped: message content is inert) and kept
live with htmx; charts are uPlot. Both are vendored under ``static/``.

- ``context``: ``Console``, what every page reads (the board, the users,
  the sampler, the cluster), and ``render``;
- ``auth``: sign-in, sessions, ``identity``, ``require``, ``csrf_token``;
- ``app``: ``create_app``: the pages registered, CSRF checked on every
  POST, the security headers;
- ``sampler``: the last hour of every queue's depth and rates, in memory;
- ``messages``: a message as text rows (envelope, typed tuple, headers,
  body as text, JSON or hex), which ``templates/message.html`` prints;
- ``forms``: what the forms say, read with the CLI's notation (patterns,
  the typed tuple editor, headers);
- ``graph``: the routing network laid out for the Network page's SVG;
- ``bulk``: bulk actions (every matching dead letter) going on in batches
  after the click, with their progress;
- ``pages/``: one module per page, each with its routes and template.

It may import the engine's face, security (the one permission table), the
shared vocabulary (with ``msgboard.definitions``, the definitions file the
CLI reads and writes too, and the codec it writes specs with) and
aiohttp/Jinja2; never the server, the cluster, the
client or the CLI (a replicating board's role and standbys reach it as
plain objects, ``context.Cluster``).
"""

from __future__ import annotations

from msgboard.console.app import create_app
from msgboard.console.context import Console, LinkRow

__all__ = ["Console", "LinkRow", "create_app"]
