"""The ``msgboard`` command (the package's face: ``main``).

- ``main``: the parser and ``main``; ``msgboard serve`` starts the server;
- ``commands``: every client command, one function each;
- ``lines``: how messages and rows are printed and read back (NDJSON);
- ``bulk``: ``post --ndjson``; ``watching``: ``watch`` and its manual acks.

Every command but ``serve`` (and the Spark side's ``export``/``report``) is a
client of a board: it imports ``msgboard.client``, never the engine.
"""

from __future__ import annotations

from msgboard.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
