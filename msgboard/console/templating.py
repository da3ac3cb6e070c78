"""How a page is rendered: Jinja2 over ``templates/``, autoescape on for
every template, whatever its name. Whatever a page puts in (a queue name, a
header, a body) is text in the HTML, never markup; nothing is marked safe
(``|safe``, ``Markup``) anywhere in the console.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jinja2
from aiohttp import web

from msgboard.console.auth import csrf_token, identity
from msgboard.console.context import CONSOLE, NAV

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("msgboard.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(
    request: web.Request, name: str, context: Mapping[str, Any] | None = None, status: int = 200
) -> web.Response:
    """``templates/NAME`` rendered for ``request``: the page's ``context``
    plus what ``base.html`` needs (who is signed in, the CSRF token, the
    navigation bar, the refresh interval)."""
    page = {
        "me": identity(request),
        "csrf": csrf_token(request),
        "nav": request.app[NAV],
        "path": request.path,
        "every_ms": int(request.app[CONSOLE].every * 1000),
        **(context or {}),
    }
    text = _env.get_template(name).render(page)
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")
