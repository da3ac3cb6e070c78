"""``msgboard cluster status``: who leads a cluster, and how far behind each
standby is.

With ``--cluster NAME --etcd URL[,URL...]`` it reads etcd: the primary (the
leader key: its board, address and epoch), the in-sync set and the positions
the members published; then it asks the primary (the replication service's
``Status``, with the cluster's ``--replication-token``) for its log index and
each connected standby's acknowledged index and lag, in entries and in
seconds. Each standby is shown by the name it gave its primary (its
address of static roles, its board name in a cluster), with the stable id
the primary keeps its acknowledgements under (``board_id``; a column of its
own when it differs from the name). With ``--server HOST:PORT`` instead of etcd it asks that board
alone, as a primary of static roles (``msgboard serve --replication-token``).

The parser part (``add_parser``) loads nothing heavy; ``status`` loads gRPC
and the cluster's etcd client when it runs.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Any

from msgboard.errors import InvalidArgument, MsgboardError, NotPrimary, Unavailable

#: The environment variable of ``--replication-token`` (as ``msgboard serve``'s).
TOKEN_ENV = "MSGBOARD_REPLICATION_TOKEN"
#: Seconds the Status call may take.
TIMEOUT = 10.0


def add_parser(actions: Any, common: argparse.ArgumentParser) -> None:
    """Adds ``status`` to the ``cluster`` group's subparsers ``actions``."""
    p = actions.add_parser(
        "status",
        parents=[common],
        help="the primary, its epoch, each standby's acked index and lag, the in-sync set",
    )
    p.add_argument(
        "--cluster",
        metavar="NAME",
        help="the cluster's name in etcd, with --etcd (default $MSGBOARD_CLUSTER)",
    )
    p.add_argument(
        "--etcd",
        metavar="URL[,URL...]",
        help="etcd's members, with --cluster (default $MSGBOARD_ETCD); without them, "
        "--server names the boards of static roles",
    )
    p.add_argument(
        "--replication-token",
        metavar="TOKEN",
        help=f"the cluster's token: the primary tells its standbys' lag only to it "
        f"(default ${TOKEN_ENV})",
    )


@dataclass
class Status:
    """What ``cluster status`` found."""

    primary: str
    cluster: str = ""
    board: str = ""
    epoch: int = 0
    last: int | None = None
    in_sync: list[str] | None = None
    members: list[dict[str, Any]] = field(default_factory=list)
    standbys: list[dict[str, Any]] = field(default_factory=list)
    #: Why the primary's own figures are missing ("": they are here).
    unasked: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster or None,
            "primary": {"board": self.board or None, "address": self.primary or None},
            "epoch": self.epoch,
            "last": self.last,
            "in_sync": self.in_sync,
            "members": self.members,
            "standbys": self.standbys,
            **({"unasked": self.unasked} if self.unasked else {}),
        }

    def lines(self) -> list[str]:
        out = []
        if self.cluster:
            out.append(f"cluster  {self.cluster}")
        who = f"{self.primary}" + (f" (board {self.board})" if self.board else "")
        where = f"epoch {self.epoch}" if self.cluster else "static roles"
        at = f", log index {self.last}" if self.last is not None else ""
        out.append(f"primary  {who}, {where}{at}" if self.primary else "primary  none")
        if self.in_sync is not None:
            out.append(f"in sync  {', '.join(self.in_sync) or 'none'}")
        if self.unasked:
            out.append(f"standbys not asked: {self.unasked}")
        elif not self.standbys:
            out.append("standbys none connected")
        else:
            etcd = self.in_sync is not None
            # The id column when an id says more than the name (static roles).
            ids = any(s["board_id"] and s["board_id"] != s["board"] for s in self.standbys)
            rows = [
                [
                    "standby",
                    *(["id"] if ids else []),
                    "acked",
                    "lag entries",
                    "lag seconds",
                    *(["in sync"] if etcd else []),
                ]
            ]
            for s in self.standbys:
                rows.append(
                    [
                        s["board"],
                        *([s["board_id"]] if ids else []),
                        str(s["acked"]),
                        str(s["lag_entries"]),
                        f"{s['lag_seconds']:.3f}",
                        *((["yes"] if s["in_sync"] else ["no"]) if etcd else []),
                    ]
                )
            out.extend(_table(rows))
        if self.members:
            rows = [["member", "index", "epoch", "address"]]
            for m in self.members:
                rows.append([m["board"], str(m["index"]), str(m["epoch"]), m["address"]])
            out.extend(_table(rows))
        return out


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    return out


def status(args: argparse.Namespace) -> int:
    """Runs ``msgboard cluster status``: prints the table (or one JSON object);
    0 when the primary answered (or was not asked: no token), 1 when etcd
    names none or the primary etcd names did not answer (what etcd holds is
    printed all the same). With ``--server`` it raises what the board
    answered (Unavailable when none of the addresses could be reached,
    Unauthenticated without the right token)."""
    token = args.replication_token or os.environ.get(TOKEN_ENV, "")
    cluster, urls = args.cluster, args.etcd
    if not (cluster or urls or args.server):  # the environment's, as switchover's
        cluster = os.environ.get("MSGBOARD_CLUSTER", "")
        urls = os.environ.get("MSGBOARD_ETCD", "")
    if cluster or urls:
        if not (cluster and urls):
            raise InvalidArgument(
                "--cluster and --etcd go together ($MSGBOARD_CLUSTER, $MSGBOARD_ETCD): "
                "give both, or --server"
            )
        found = _from_etcd(cluster, urls)
    else:
        server = args.server or os.environ.get("MSGBOARD_SERVER", "")
        if not server:
            raise InvalidArgument(
                "cluster status needs --cluster NAME --etcd URL[,URL...], or --server "
                "HOST:PORT (a primary of static roles) with --replication-token"
            )
        if not token:
            raise InvalidArgument(
                f"--server needs --replication-token (or ${TOKEN_ENV}): the primary "
                "tells its standbys' lag only to the cluster"
            )
        found = _ask_any([a.strip() for a in server.split(",") if a.strip()], token, args)
    answered = True
    if found.cluster and found.primary and token:
        try:
            _ask(found, token, args)
        except MsgboardError as e:
            found.unasked = f"the primary did not answer: {e.code}: {e}"
            answered = False
    elif found.cluster and found.primary:
        found.unasked = f"give --replication-token (or ${TOKEN_ENV}) to ask the primary"
    if args.json:
        print(json.dumps(found.to_json()))
    else:
        for line in found.lines():
            print(line)
    return 0 if found.primary and answered else 1


def _ask_any(addresses: list[str], token: str, args: argparse.Namespace) -> Status:
    """The status of the primary among ``addresses`` (static roles): each is
    asked in turn; a standby's NotPrimary names the primary, asked next."""
    last: MsgboardError | None = None
    tried: set[str] = set()
    queue = list(addresses)
    while queue:
        address = queue.pop(0)
        if address in tried:
            continue
        tried.add(address)
        found = Status(primary=address)
        try:
            _ask(found, token, args)
            return found
        except NotPrimary as e:
            last = e
            if e.primary:
                queue.insert(0, e.primary)
        except Unavailable as e:
            last = e
    assert last is not None
    raise last


def _from_etcd(cluster: str, urls: str) -> Status:
    from msgboard.cluster import TRANSIENT, Etcd, Keys, Primary, read_sync
    from msgboard.cluster.etcd import Entry, encode

    try:
        keys = Keys(cluster)
        etcd = Etcd(urls, timeout=TIMEOUT / 2)
    except ValueError as e:
        raise InvalidArgument(str(e)) from None
    try:
        leader, _ = etcd.get(keys.leader)
        sync = read_sync(etcd, keys)
        prefix = keys.prefix + "members/"
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        answer = etcd.call("kv/range", {"key": encode(prefix), "range_end": encode(end)})
    except TRANSIENT as e:
        raise Unavailable(f"etcd at {urls}: {e}") from None
    finally:
        etcd.close()
    primary = Primary.of(leader) if leader is not None else None
    found = Status(
        primary=primary.address if primary else "",
        cluster=cluster,
        board=primary.name if primary else "",
        epoch=primary.epoch if primary else 0,
        in_sync=list(sync.standbys) if sync and primary and sync.epoch == primary.epoch else [],
    )
    for kv in answer.get("kvs", []):
        entry = Entry.of(kv)
        try:
            body = json.loads(entry.value)
        except ValueError:
            continue
        found.members.append(
            {
                "board": entry.key.decode(errors="replace")[len(prefix) :],
                "index": int(body.get("index", 0)),
                "epoch": int(body.get("epoch", 0)),
                "address": str(body.get("address", "")),
            }
        )
    return found


def _ask(found: Status, token: str, args: argparse.Namespace) -> None:
    """Fills ``found`` with the primary's own answer to ``Status``."""
    import grpc

    from msgboard.client.wire import rpc_error
    from msgboard.cluster.channel import channel
    from msgboard.cluster.service import TOKEN_KEY
    from msgboard.tls import channel_credentials
    from msgboard.v1 import replication_pb2 as rpb
    from msgboard.v1 import replication_pb2_grpc as rpb_grpc

    ca = args.tls_ca or os.environ.get("MSGBOARD_TLS_CA", "")
    credentials = channel_credentials(ca, args.tls_cert or "", args.tls_key or "") if ca else None
    try:
        with channel(found.primary, credentials) as ch:
            answer = rpb_grpc.ReplicationStub(ch).Status(
                rpb.StatusRequest(), metadata=((TOKEN_KEY, token),), timeout=TIMEOUT
            )
    except grpc.RpcError as e:
        raise rpc_error(e) from None
    if found.cluster and answer.epoch and answer.epoch != found.epoch:
        found.unasked = (
            f"{found.primary} answers for epoch {answer.epoch}, etcd names epoch {found.epoch}: "
            "the leadership is changing; ask again"
        )
        return
    found.last = answer.last
    found.epoch = found.epoch or answer.epoch
    for s in answer.standbys:
        found.standbys.append(
            {
                "board": s.board,
                "board_id": s.board_id,
                "acked": s.acked,
                "lag_entries": s.lag_entries,
                "lag_seconds": round(s.lag_seconds, 3),
                # The in-sync set names the ids the primary counts.
                "in_sync": (s.board_id or s.board) in found.in_sync
                if found.in_sync is not None
                else None,
            }
        )
