"""The server's logs: text or JSON lines, a level, and the access log.

``configure`` sets up the root logger from ``--log-format`` (``text``: one
readable line; ``json``: one JSON object a line, keys ``time``, ``level``,
``logger``, ``message``, and ``error`` with a traceback) and ``--log-level``,
all on standard error. The access log (``msgboard.server.calls`` writes it, logger
``msgboard.access``) goes to ``--access-log FILE``, or to standard error
with the rest for ``-``; in JSON its fields are keys of their own (``method``,
``peer``, ``identity``, ``queue``, ``status``, ``duration_ms``).

What is logged never holds a message body or a token: the server logs
names, addresses, counts and status codes only.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

from msgboard.config import ServeConfig

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            out.update(access)
        else:
            out["message"] = record.getMessage()
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def formatter(kind: str) -> logging.Formatter:
    return JsonFormatter() if kind == "json" else logging.Formatter(TEXT)


def configure(c: ServeConfig) -> None:
    """Sets up logging as ``c`` says (replacing any handlers set before)."""
    fmt = formatter(c.log_format)
    root = logging.getLogger()
    for h in root.handlers[:]:
        root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(fmt)
    root.addHandler(handler)
    root.setLevel(c.log_level.upper())
    access = logging.getLogger("msgboard.access")
    for h in access.handlers[:]:
        access.removeHandler(h)
        h.close()
    # The access log is on or off by its own setting, whatever the level.
    access.setLevel(logging.INFO)
    if c.access_log in ("", "-"):
        access.propagate = True
        return
    own = logging.FileHandler(c.access_log, encoding="utf-8")
    own.setFormatter(fmt)
    access.addHandler(own)
    access.propagate = False
