"""``msgboard link create|list|delete``, and how ``selector create`` reads
``LINK:QUEUE``.

The connection flags (``--server``, ``--token``, ``--tls-*``) name the
board the command talks to, as for every command; the linked board is the
positional ``ADDRESS`` and its credentials the ``--link-*`` flags. The PEM
files are read here and kept by the board (docs/links.md).

Queue names may contain ':', so ``selector create SRC --to X:Y`` crosses
a link only when the board has a link named X (ListLinks, admin); without
one, or when the caller may not list links, ``X:Y`` is a local queue
(``--link X --to Y`` says it outright).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from msgboard.cli.lines import note, print_rows, when
from msgboard.errors import PermissionDenied


def add_link_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``link`` command and its actions."""
    q = sub.add_parser("link", help="links from this board to other boards (admin)")
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser("create", parents=[common], help="create a link to another board")
    p.add_argument("name", help="the link's name (1-64 letters, digits or '._-')")
    p.add_argument("address", metavar="ADDRESS", help="the linked board: HOST:PORT[,HOST:PORT...]")
    p.add_argument("--link-token", metavar="TOKEN", default="", help="the token it shows there")
    p.add_argument("--link-tls-ca", metavar="FILE", default="", help="TLS to it, trusting this CA")
    p.add_argument("--link-tls-cert", metavar="FILE", default="", help="a client certificate")
    p.add_argument("--link-tls-key", metavar="FILE", default="", help="its private key")
    p.add_argument(
        "--link-tls", action="store_true", help="TLS with the system's roots (no CA file)"
    )
    qs.add_parser("list", parents=[common], help="list the links with their state and lag")
    p = qs.add_parser("delete", parents=[common], help="delete a link (no selector may cross it)")
    p.add_argument("name", help="the link's name")


def link_json(v: Any) -> dict[str, Any]:
    """A link as ``link list`` prints it."""
    return {
        "name": v.spec.name,
        "address": v.spec.server,
        "state": v.state,
        "lag_messages": v.lag_messages,
        "lag_seconds": round(v.lag_seconds, 3),
        "forwarded": v.forwarded,
        "duplicates": v.duplicates,
        "in_flight": v.in_flight,
        "selectors": ",".join(v.selectors),
        "since": when(v.since) if v.since else "",
        "last_error": v.last_error,
    }


def link_command(c: Any, args: argparse.Namespace) -> int:
    if args.action == "create":
        v = c.create_link(
            args.name,
            args.address,
            token=args.link_token,
            tls_ca=args.link_tls_ca,
            tls_cert=args.link_tls_cert,
            tls_key=args.link_tls_key,
            tls=args.link_tls,
        )
        print(json.dumps(link_json(v)) if args.json else v.spec.name)
    elif args.action == "list":
        links = c.list_links()
        print_rows([link_json(v) for v in links], args.json)
        if not links:
            note("no links")
    else:
        c.delete_link(args.name)
        if args.json:
            print(json.dumps({"deleted": args.name}))
    return 0


def split_link(c: Any, name: str) -> tuple[str, str]:
    """``LINK:QUEUE`` as (link, queue) when the board has a link named
    LINK; otherwise ("", name): a local queue."""
    link, sep, queue = name.partition(":")
    if not sep or not link or not queue:
        return "", name
    try:
        names = {v.spec.name for v in c.list_links()}
    except PermissionDenied:
        return "", name  # who may not list links names a local queue
    return (link, queue) if link in names else ("", name)
