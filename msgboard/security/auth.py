"""Identities: who is calling, from the users file and the call's credentials.

The users file is TOML::

    [[user]]
    name = "alice"
    token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    cert_cn = "alice.example.com"     # optional: the CN of her mTLS certificate
    [[user.allow]]
    queues = "jobs*"                  # a glob over queue names
    verbs = ["read", "write"]         # read, write, manage, admin

A user is known by a bearer token (gRPC metadata ``authorization: Bearer
<token>``; the file holds only the token's hex SHA-256) and/or by the common
name of the client certificate the TLS layer verified. ``authenticate``
answers a call with no or an unknown credential with one Unauthenticated
message, whatever the cause, so that a caller learns nothing about which
users exist. What a user may do is ``msgboard.security.permissions``'s business.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from msgboard.config import read_toml
from msgboard.errors import ConfigError, MsgboardError, PermissionDenied, Unauthenticated
from msgboard.tls import AUTH_KEY, BEARER

VERBS = ("read", "write", "manage", "admin")
#: The one answer to a call whose credential is missing or unknown.
UNAUTHENTICATED = (
    "no valid credential: send a token the board knows (authorization: Bearer) "
    "or a client certificate of a known user"
)
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: The name of the user the current call authenticated as: set by the guard
#: before the servicer runs (in the call's own task), "" on an open board.
#: Servicers read it to tell the engine who a consumer is.
caller: ContextVar[str] = ContextVar("msgboard_caller", default="")


def blame(e: MsgboardError) -> MsgboardError:
    """``e``, a PermissionDenied the engine raised (a ``Reserved`` queue)
    with its ``user`` filled in: the caller ("" on an open board)."""
    if isinstance(e, PermissionDenied) and not e.user:
        e.user = caller.get()
    return e


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """Verbs allowed on the queues whose names match a glob."""

    queues: str
    verbs: frozenset[str]


@dataclasses.dataclass(frozen=True, slots=True)
class User:
    name: str
    rules: tuple[Rule, ...] = ()
    token_sha256: str = ""
    cert_cn: str = ""

    @property
    def admin(self) -> bool:
        return any("admin" in r.verbs for r in self.rules)


def token_hash(token: str) -> str:
    """The hex SHA-256 of a token, as the users file holds it."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh random token (256 bits, URL-safe) and its ``token_sha256``."""
    token = secrets.token_urlsafe(32)
    return token, token_hash(token)


class Users:
    """The users of a board, found by token hash or certificate name."""

    def __init__(self, users: Iterable[User], source: str = "") -> None:
        self.source = source
        self.all: tuple[User, ...] = tuple(users)
        self._by_token = {u.token_sha256: u for u in self.all if u.token_sha256}
        self._by_cn = {u.cert_cn: u for u in self.all if u.cert_cn}

    @classmethod
    def load(cls, path: str | Path) -> Users:
        """Reads a users file; ConfigError naming the file, and the line or
        the user, for anything wrong in it."""
        doc = read_toml(path, "users file")
        return cls(parse_users(doc, f"users file {path}"), str(path))

    def authenticate(self, metadata: Sequence[tuple[str, Any]], cert_cn: str | None) -> User:
        """The user a call's credentials name: a bearer token if the call
        has one, else the CN of its verified client certificate.
        Unauthenticated otherwise, always with the same message."""
        bearer = [v for k, v in metadata if k == AUTH_KEY]
        if bearer:
            value = bearer[0] if isinstance(bearer[0], str) else ""
            scheme, _, token = value.partition(" ")
            if len(bearer) == 1 and scheme.lower() == BEARER.strip().lower() and token:
                digest = token_hash(token.strip())
                user = self._by_token.get(digest)
                # The dict found it by hash; compare again in constant time.
                if user is not None and hmac.compare_digest(user.token_sha256, digest):
                    return user
            raise Unauthenticated(UNAUTHENTICATED)
        if cert_cn:
            user = self._by_cn.get(cert_cn)
            if user is not None:
                return user
        raise Unauthenticated(UNAUTHENTICATED)


def parse_users(doc: Mapping[str, Any], where: str) -> list[User]:
    """Users from a parsed users file."""
    extra = set(doc) - {"user"}
    if extra:
        raise ConfigError(f"{where}: unknown top-level key {sorted(extra)[0]!r} (only [[user]])")
    entries = doc.get("user", [])
    if not isinstance(entries, list):
        raise ConfigError(f"{where}: `user` must be an array of tables ([[user]])")
    users: list[User] = []
    names: set[str] = set()
    tokens: dict[str, str] = {}
    cns: dict[str, str] = {}
    for i, e in enumerate(entries, 1):
        at = f"{where}: user #{i}"
        name = e.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{at}: `name` must be a non-empty string")
        at = f"{where}: user {name!r}"
        unknown = set(e) - {"name", "token_sha256", "cert_cn", "allow"}
        if unknown:
            raise ConfigError(f"{at}: unknown key {sorted(unknown)[0]!r}")
        if name in names:
            raise ConfigError(f"{at}: a second user of that name")
        names.add(name)
        digest = e.get("token_sha256", "")
        cn = e.get("cert_cn", "")
        if not isinstance(digest, str) or (digest and not _HEX64.fullmatch(digest)):
            raise ConfigError(
                f"{at}: token_sha256 must be 64 lowercase hex digits (msgboard user token)"
            )
        if not isinstance(cn, str):
            raise ConfigError(f"{at}: cert_cn must be a string")
        if not digest and not cn:
            raise ConfigError(f"{at}: give token_sha256, cert_cn or both")
        if digest in tokens:
            raise ConfigError(f"{at}: the same token_sha256 as user {tokens[digest]!r}")
        if cn in cns:
            raise ConfigError(f"{at}: the same cert_cn as user {cns[cn]!r}")
        if digest:
            tokens[digest] = name
        if cn:
            cns[cn] = name
        users.append(User(name, _rules(e.get("allow", []), at), digest, cn))
    return users


def _rules(entries: Any, at: str) -> tuple[Rule, ...]:
    if not isinstance(entries, list):
        raise ConfigError(f"{at}: `allow` must be an array of tables ([[user.allow]])")
    rules = []
    for j, r in enumerate(entries, 1):
        here = f"{at}, allow #{j}"
        if not isinstance(r, dict) or set(r) != {"queues", "verbs"}:
            raise ConfigError(f"{here}: give exactly `queues` (a glob) and `verbs` (a list)")
        queues, verbs = r["queues"], r["verbs"]
        if not isinstance(queues, str) or not queues:
            raise ConfigError(f"{here}: `queues` must be a non-empty glob string")
        if not isinstance(verbs, list) or not all(isinstance(v, str) for v in verbs):
            raise ConfigError(f"{here}: `verbs` must be a list of strings")
        bad = [v for v in verbs if v not in VERBS]
        if bad:
            raise ConfigError(f"{here}: unknown verb {bad[0]!r} (verbs: {', '.join(VERBS)})")
        if "admin" in verbs and queues != "*":
            raise ConfigError(f'{here}: admin is board-wide: give it with queues = "*"')
        rules.append(Rule(queues, frozenset(verbs)))
    return tuple(rules)
