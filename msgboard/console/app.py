"""The console's aiohttp application: its pages registered, and what every
request goes through before a page sees it.

``create_app`` registers each page module of ``PAGES`` (its ``routes``, and
its ``NAV`` entry in the navigation bar), the vendored assets under
``/static/``, and whatever the server adds (``/metrics``). One middleware,
``guard``, runs before every page:

1. the request's session and identity (``auth.resolve``); the open board's
   visitor, and a visitor of the sign-in page, get a session (a *visit*)
   with its CSRF token;
2. a board with users: anyone not signed in is sent to ``/signin`` (a page)
   or answered 401 (htmx and scripts: ``HX-Redirect`` says where);
3. **every POST** (and PUT, PATCH, DELETE) must carry the session's CSRF
   token, in the ``X-CSRF-Token`` header or a form's ``csrf`` field, or it
   is refused 403 before any page runs: no page can forget it;
4. every answer gets the security headers: a Content-Security-Policy that
   runs no script but the console's own files (no inline script, no
   ``eval``), no framing, no sniffing, no referrer, and pages not cached.

``/metrics`` and ``/static/`` go through none of this (no session, no
cookie): they are what they were before the console (the listener's TLS
and loopback rules apply to them as to everything on it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from types import ModuleType
from urllib.parse import quote

from aiohttp import web

from msgboard.console import auth
from msgboard.console.bulk import BULKS, Bulks
from msgboard.console.context import CONSOLE, NAV, Console
from msgboard.console.pages import (
    browse,
    cluster,
    compose,
    consumers,
    deadletters,
    definitions,
    events,
    network,
    overview,
    queue,
    signin,
)
from msgboard.console.sampler import SAMPLER, Sampler
from msgboard.console.templating import render

#: The page modules, in the navigation bar's order. Each has ``routes``
#: (an ``aiohttp.web.RouteTableDef``) and ``NAV``: (label, path) or None.
PAGES: tuple[ModuleType, ...] = (
    overview,
    network,
    browse,
    deadletters,
    consumers,
    compose,
    definitions,
    events,
    cluster,
    queue,
    signin,
)
STATIC = Path(__file__).parent / "static"
#: Paths served to anyone the listener lets in, with no session.
PUBLIC = ("/metrics", "/static/")
#: Paths a visitor who is not signed in may reach.
SIGN_IN_PATHS = ("/signin",)
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
        "base-uri 'none'; form-action 'self'; object-src 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Sessions, sign-in, CSRF and the security headers (the module's story)."""
    path = request.path
    if path == "/metrics" or path.startswith("/static/"):
        return await handler(request)
    session, who = auth.resolve(request)
    fresh = None
    if session is None and (who.signed_in or path in SIGN_IN_PATHS):
        # A visit: the open board's visitor, a client certificate's user, or
        # someone about to sign in; it carries the CSRF token.
        fresh = session = request.app[auth.SESSIONS].open("", auth.VISIT_SECONDS)
        if who.signed_in:
            fresh.expires += auth.SESSION_SECONDS - auth.VISIT_SECONDS
    if session is not None:
        request[auth.SESSION_OF] = session
    request[auth.IDENTITY_OF] = who
    if request.method in UNSAFE:
        sent = request.headers.get(auth.CSRF_HEADER, "")
        if not sent and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            form = await request.post()
            value = form.get(auth.CSRF_FIELD, "")
            sent = value if isinstance(value, str) else ""
        if not auth.csrf_ok(request, sent):
            refused = "refused: this request carries no valid CSRF token (reload the page)"
            forbidden = web.HTTPForbidden(text=refused)
            return _headed(_page_of(request, forbidden) or web.Response(status=403, text=refused))
    if not who.signed_in and path not in SIGN_IN_PATHS:
        if request.headers.get("HX-Request") or request.method != "GET":
            headers = {"HX-Redirect": "/signin"}
            later = web.Response(status=401, text="sign in first", headers=headers)
        else:
            headers = {"Location": f"/signin?next={_quoted(request.path_qs)}"}
            later = web.Response(status=302, headers=headers)
        return _headed(later)
    try:
        response = await handler(request)
    except web.HTTPException as e:  # a page's 403, 404, redirect: raised on, headed
        page = _page_of(request, e)
        if page is None:
            if fresh is not None:
                auth.set_cookie(e, request, fresh)
            _headed(e)
            raise
        response = page
    if fresh is not None:
        auth.set_cookie(response, request, fresh)
    return _headed(response)


def _page_of(request: web.Request, e: web.HTTPException) -> web.Response | None:
    """A page's refusal (403, 404, 400...) as a page of the console, with
    its navigation and the reason, for a browser's page load (a request
    that asks for HTML, not htmx's); None: answered as it is (plain text
    for scripts and htmx, redirects)."""
    if e.status < 400 or request.headers.get("HX-Request"):
        return None
    if "text/html" not in request.headers.get("Accept", ""):
        return None
    text = e.text if e.text and not e.text.startswith(f"{e.status}:") else e.reason
    context = {"status": e.status, "reason": e.reason, "text": text}
    return render(request, "error.html", context, status=e.status)


def _quoted(path: str) -> str:
    return quote(path, safe="/")


def _headed(response: web.StreamResponse) -> web.StreamResponse:
    if not response.prepared:
        response.headers.update(HEADERS)
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def create_app(console: Console, routes: Iterable[web.RouteDef] = ()) -> web.Application:
    """The console's application for ``console``, with ``routes`` (the
    server's ``/metrics``) beside it. Its sampler starts with the app (in
    the loop that runs it) and stops with it."""
    app = web.Application(middlewares=[guard], client_max_size=4 * 1024 * 1024)
    app[CONSOLE] = console
    app[auth.SESSIONS] = auth.Sessions()
    app[SAMPLER] = sampler = Sampler(console)
    app[NAV] = [m.NAV for m in PAGES if m.NAV is not None]
    app[BULKS] = bulks = Bulks()
    app.router.add_routes(list(routes))
    for page in PAGES:
        app.router.add_routes(page.routes)
    app.router.add_static("/static/", STATIC, append_version=False)

    async def started(app: web.Application) -> None:
        sampler.start()

    async def closing(app: web.Application) -> None:
        console.closing.set()

    async def cleaned(app: web.Application) -> None:
        await sampler.stop()
        await bulks.close()

    app.on_startup.append(started)
    app.on_shutdown.append(closing)
    app.on_cleanup.append(cleaned)
    return app
