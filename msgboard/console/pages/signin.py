"""Sign-in and sign-out (``msgboard.console.auth`` tells how sessions work).

The form takes the token a user's gRPC client sends; a wrong one is
answered with the same words whatever was wrong, as gRPC answers
Unauthenticated. ``next`` sends the person back where they were going
(a path on this console only).
"""

from __future__ import annotations

from aiohttp import web

from msgboard.console import auth
from msgboard.console.context import CONSOLE
from msgboard.console.templating import render

NAV = None
routes = web.RouteTableDef()
WRONG = "That token is not one this board knows."


def _next(value: object) -> str:
    """Only a path of this console (never another site)."""
    text = value if isinstance(value, str) else ""
    if not text.startswith("/") or text.startswith("//") or "\\" in text:
        return "/"
    return text


@routes.get("/signin")
async def form(request: web.Request) -> web.Response:
    if request.app[CONSOLE].users() is None:
        raise web.HTTPFound("/")  # the open board: nobody signs in
    return render(request, "signin.html", {"next": _next(request.query.get("next")), "error": ""})


@routes.post("/signin")
async def sign_in(request: web.Request) -> web.StreamResponse:
    data = await request.post()
    token = data.get("token", "")
    where = _next(data.get("next"))
    session = auth.sign_in(request, token if isinstance(token, str) else "")
    if session is None:
        return render(request, "signin.html", {"next": where, "error": WRONG}, status=401)
    response = web.HTTPSeeOther(where)
    auth.set_cookie(response, request, session)
    raise response


@routes.post("/signout")
async def sign_out(request: web.Request) -> web.StreamResponse:
    response = web.HTTPSeeOther("/signin")
    auth.sign_out(request, response)
    raise response
