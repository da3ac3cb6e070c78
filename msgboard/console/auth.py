"""Who is using the console, and what they may do: sign-in, sessions, CSRF.

The console knows the same users as gRPC (the board's users file) and asks
the same one permission table (``msgboard.security.permissions.allows``).

- **Sign-in**: a person pastes their token (the one their gRPC client
  sends) into the sign-in form; the board checks it as it checks a call's
  bearer token (only its SHA-256 is known) and opens a session.
- **The session** is a random 256-bit id in a cookie ``msgboard_session``:
  ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's
  page sends it), ``Path=/``, ``Secure`` over TLS, for ``SESSION_SECONDS``
  (8 hours) from sign-in, not renewed by use; signing out ends it at once.
  Sessions live in the board's memory (at most ``MAX_SESSIONS`` signed in
  and as many visits, the oldest dropped first): a restart signs everyone
  out. A session's user is looked up again by name at every request, so a
  SIGHUP that removes a user or changes their rules takes effect at once.
- **CSRF**: every session has its own random token; every POST must carry
  it (a form's hidden ``csrf`` field, or the ``X-CSRF-Token`` header that
  htmx sends from ``base.html``), checked once for all in ``app.py``'s
  middleware. The sign-in form is a POST too: its visitor gets a session
  with no user (a *visit*) and its token.
- **The open board** (no users file) needs no sign-in: every visitor gets
  a visit whose identity is the open board's, allowed everything, as gRPC
  allows every call there.
- **Client certificates**: on a board with ``--tls-client-ca``, a browser
  presenting a certificate whose common name is a user's ``cert_cn`` is
  that user without signing in (a token signed in wins, as on gRPC).

Pages use ``identity(request)``, ``require(request, verb, queue)`` (403
unless allowed; a ``user.denied`` event on ``$sys`` as the gRPC guard
posts) and ``csrf_token(request)``; ``Identity.may`` tells a template
whether to show a button.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import time
from collections import OrderedDict

from aiohttp import web

from msgboard.console.context import CONSOLE
from msgboard.engine.events import USER_DENIED
from msgboard.security.auth import User, Users, token_hash
from msgboard.security.permissions import BOARD, READ, allows

COOKIE = "msgboard_session"
#: How long a session lasts from sign-in.
SESSION_SECONDS = 8 * 3600
#: How long a visit (no user yet: the sign-in form) lasts.
VISIT_SECONDS = 3600
#: Sessions and visits kept at once; past it the oldest go first.
MAX_SESSIONS = 10_000
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    """Who a request comes from. ``user`` None with ``name`` "": the open
    board's visitor, allowed everything; ``signed_in`` False: nobody yet
    (a board with users, before sign-in)."""

    name: str
    user: User | None
    signed_in: bool

    @property
    def open(self) -> bool:
        return self.signed_in and self.user is None

    def may(self, verb: str, queue: str = BOARD) -> bool:
        """Whether this identity may ``verb`` on ``queue`` (BOARD: the whole
        board), by the one permission table."""
        if not self.signed_in:
            return False
        return self.user is None or allows(self.user, verb, queue)


NOBODY = Identity("", None, False)
OPEN = Identity("", None, True)


@dataclasses.dataclass(slots=True)
class Session:
    id: str
    csrf: str
    #: The user's name; "" for a visit (no user signed in).
    user: str
    expires: float
    #: The queue of the last queue page opened (a queue's page, Browse,
    #: Dead letters): where Browse opens when no queue is named.
    queue: str = ""


class Sessions:
    """The console's sessions, in memory, bounded: signed-in sessions and
    visits (no user) are kept apart, each at most ``limit``, the oldest
    dropped first, so that a flood of visits (anyone may open the sign-in
    page) never signs anyone out."""

    def __init__(self, limit: int = MAX_SESSIONS) -> None:
        self.limit = limit
        self._signed: OrderedDict[str, Session] = OrderedDict()
        self._visits: OrderedDict[str, Session] = OrderedDict()

    def open(self, user: str, seconds: float) -> Session:
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), user, 0.0)
        s.expires = time.monotonic() + seconds
        kept = self._signed if user else self._visits
        kept[s.id] = s
        while len(kept) > self.limit:
            kept.popitem(last=False)
        return s

    def find(self, sid: str) -> Session | None:
        s = self._signed.get(sid) or self._visits.get(sid)
        if s is None:
            return None
        if time.monotonic() >= s.expires:
            self.close(sid)
            return None
        return s

    def close(self, sid: str) -> None:
        self._signed.pop(sid, None)
        self._visits.pop(sid, None)

    def __len__(self) -> int:
        return len(self._signed) + len(self._visits)


SESSIONS = web.AppKey("sessions", Sessions)
#: The request's session (None: none yet) and identity, set by ``app.py``'s
#: middleware before any page runs.
SESSION_OF = web.RequestKey("session", Session)
IDENTITY_OF = web.RequestKey("identity", Identity)


def resolve(request: web.Request) -> tuple[Session | None, Identity]:
    """The request's session, from its cookie, and who it is."""
    users = request.app[CONSOLE].users()
    sid = request.cookies.get(COOKIE, "")
    session = request.app[SESSIONS].find(sid) if sid else None
    if users is None:
        return session, OPEN
    user = _named(users, session.user) if session is not None and session.user else None
    if user is None:  # not signed in, or removed from the users file since
        cn = peer_cn(request)
        user = next((u for u in users.all if u.cert_cn and u.cert_cn == cn), None) if cn else None
    if user is None:
        return session, NOBODY
    return session, Identity(user.name, user, True)


def _named(users: Users, name: str) -> User | None:
    return next((u for u in users.all if u.name == name), None)


def peer_cn(request: web.Request) -> str:
    """The common name of the client certificate the TLS layer verified
    ("" without one): a user known by ``cert_cn`` needs no sign-in, as
    their gRPC calls need no token."""
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return ""
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


def identity(request: web.Request) -> Identity:
    """Who ``request`` comes from (set by the middleware)."""
    who = request.get(IDENTITY_OF)
    return who if who is not None else NOBODY


def csrf_token(request: web.Request) -> str:
    """The request's session's CSRF token ("" without a session)."""
    session = request.get(SESSION_OF)
    return session.csrf if session is not None else ""


def require(request: web.Request, verb: str, queue: str = BOARD) -> Identity:
    """The request's identity if it may ``verb`` on ``queue`` (BOARD: the
    whole board); else 403, and a ``user.denied`` event on ``$sys``."""
    who = identity(request)
    if who.may(verb, queue):
        return who
    where = "the whole board" if queue == BOARD else f"queue {queue!r}"
    what = f"console: {verb} on {where}"
    board = request.app[CONSOLE].board
    if board is not None and who.signed_in:
        board.emit(USER_DENIED, who.name, what)
    raise web.HTTPForbidden(text=f"user {who.name!r} may not {verb} {where}")


def remember(request: web.Request, queue: str) -> None:
    """Notes ``queue`` as the one the session last looked at."""
    session = request.get(SESSION_OF)
    if session is not None:
        session.queue = queue


def reading(request: web.Request, key: str) -> str:
    """The queue a page's path names (``key`` of its match), once the
    identity may read it (else 403), noted as the one last looked at."""
    queue = request.match_info[key]
    require(request, READ, queue)
    remember(request, queue)
    return queue


def last_queue(request: web.Request) -> str:
    """The queue the session last looked at ("": none)."""
    session = request.get(SESSION_OF)
    return session.queue if session is not None else ""


def csrf_ok(request: web.Request, sent: str) -> bool:
    """Whether ``sent`` is the request's session's CSRF token."""
    expected = csrf_token(request)
    return bool(expected) and bool(sent) and hmac.compare_digest(expected, sent)


def sign_in(request: web.Request, token: str) -> Session | None:
    """A new session for the user whose token ``token`` is (None: no such
    user). The visit's session id is not reused (no session fixation)."""
    users = request.app[CONSOLE].users()
    if users is None or not token.strip():
        return None
    digest = token_hash(token.strip())
    found = None
    for u in users.all:  # every one compared, in constant time
        if u.token_sha256 and hmac.compare_digest(u.token_sha256, digest):
            found = u
    if found is None:
        return None
    sessions = request.app[SESSIONS]
    old = request.get(SESSION_OF)
    if old is not None:
        sessions.close(old.id)
    return sessions.open(found.name, SESSION_SECONDS)


def set_cookie(response: web.StreamResponse, request: web.Request, session: Session) -> None:
    """Hands ``session``'s cookie to the browser."""
    left = max(1, int(session.expires - time.monotonic()))
    response.set_cookie(
        COOKIE,
        session.id,
        max_age=left,
        path="/",
        httponly=True,
        samesite="Strict",
        secure=request.app[CONSOLE].tls,
    )


def sign_out(request: web.Request, response: web.StreamResponse) -> None:
    session = request.get(SESSION_OF)
    if session is not None:
        request.app[SESSIONS].close(session.id)
    response.del_cookie(COOKIE, path="/")
