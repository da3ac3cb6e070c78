"""``msgboard cluster switchover``: a planned change of a cluster's primary
with no failed write (docs/cluster.md). It talks to etcd, not to a board:
it asks the primary to hand over (``msgboard.cluster.switching``), waits
until a new term leads, and says who leads. ``msgboard.cluster`` is loaded
only when the command runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

from msgboard.errors import Unavailable


def add_switchover(clusters: Any) -> None:
    """Adds ``switchover`` to the ``cluster`` command's subparsers."""
    p = clusters.add_parser(
        "switchover",
        help="hand the primary's role to an in-sync standby: new calls go there, "
        "the primary resigns once it has every write",
    )
    p.add_argument(
        "--to",
        metavar="BOARD",
        default="",
        help="the board to lead (default: the in-sync standby furthest along)",
    )
    p.add_argument(
        "--cluster",
        metavar="NAME",
        default=os.environ.get("MSGBOARD_CLUSTER", ""),
        help="the cluster (default $MSGBOARD_CLUSTER)",
    )
    p.add_argument(
        "--etcd",
        metavar="URL[,URL...]",
        default=os.environ.get("MSGBOARD_ETCD", ""),
        help="its etcd members (default $MSGBOARD_ETCD)",
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, metavar="S", help="how long to wait for it"
    )
    p.add_argument("--json", action="store_true", help="one JSON object")


def switchover(args: argparse.Namespace) -> int:
    from msgboard.cluster import TRANSIENT, Etcd, Keys, switching
    from msgboard.errors import InvalidArgument

    if not args.cluster or not args.etcd:
        missing = "--cluster" if not args.cluster else "--etcd"
        raise InvalidArgument(f"{missing} is needed (or $MSGBOARD_{missing[2:].upper()})")
    keys = Keys(args.cluster)
    etcd = Etcd(args.etcd, timeout=2.0)
    try:
        try:
            primary, handover, lease = switching.ask(etcd, keys, args.to)
        except TRANSIENT as e:
            raise Unavailable(f"etcd: {e}") from None
        if not args.json:
            print(
                f"{primary.name} (epoch {primary.epoch}) hands over to {handover.to}",
                file=sys.stderr,
            )
        try:
            new = switching.wait(etcd, keys, primary, args.timeout)
        except TimeoutError as e:
            raise Unavailable(f"switchover to {handover.to}: {e}") from None
        finally:
            with contextlib.suppress(*TRANSIENT):
                etcd.revoke(lease)
    finally:
        etcd.close()
    if args.json:
        print(json.dumps({"primary": new.name, "address": new.address, "epoch": new.epoch}))
    else:
        print(f"{new.name} leads cluster {args.cluster} at {new.address} (epoch {new.epoch})")
    return 0 if new.name == handover.to else 1
