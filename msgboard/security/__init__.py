"""A board's security (the package's face): who may connect and what each
caller may do, decided before any servicer runs.

- ``settings``: ``Security``, assembled from the configuration at start-up
  (TLS, the users file, the exposure rule, SIGHUP reloads);
- ``auth``: who is calling (tokens, client certificates);
- ``permissions``: the one table of what each RPC needs;
- ``guard``: the interceptor that applies both;
- ``snapshot_dir``: where a Snapshot may write.

It may import the shared vocabulary (``config``, ``errors``, ``tls``) and
the generated ``v1``, and the engine's face for what a rule names (the
board, ``$sys``); never the server, the client or the CLI.
"""

from __future__ import annotations

from msgboard.security.settings import Security, check_listen

__all__ = ["Security", "check_listen"]
