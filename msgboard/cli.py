"""The ``msgboard`` command: run a board, and talk to one.

``msgboard serve`` runs the server; every other command is a client of
``--server HOST:PORT`` (default ``$MSGBOARD_SERVER`` or 127.0.0.1:7878).
``--json`` prints one JSON object per line. Tuples are JSON arrays;
templates are JSON arrays in which "?int", "?float", "?str", "?bytes",
"?bool", "?null" are formals, "?" is any, {"range": [lo, hi]} and
{"prefix": "s"} are patterns. Address patterns: eq:NAME, topic:rec.pets.*,
prefix:P, all (a bare name means eq:).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from msgboard.associative import fields_to_json, parse_template, parse_tuple
from msgboard.errors import FailedPrecondition, InvalidArgument, MsgboardError
from msgboard.message import Message, Section, to_datetime
from msgboard.spec import UNLIMITED

DEFAULT_SERVER = "127.0.0.1:7878"


def _json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"{what}: not JSON ({e.msg} at column {e.colno}): {text}") from None


def _when(us: int) -> str | None:
    return to_datetime(us).isoformat().replace("+00:00", "Z") if us else None


def message_json(m: Message) -> dict[str, Any]:
    """A message as a JSON object for --json output."""
    d: dict[str, Any] = {
        "queue": m.queue,
        "seq": m.seq,
        "section": m.section.value,
        "address": m.address,
        "tuple": fields_to_json(m.tuple),
        "headers": dict(m.headers),
        "priority": m.priority,
    }
    try:
        d["body"] = m.body.decode()
    except UnicodeDecodeError:
        d["body_base64"] = base64.b64encode(m.body).decode()
    for key, value in (
        ("content_type", m.content_type),
        ("reply_to", m.reply_to),
        ("posted_at", _when(m.posted_at)),
        ("processed_at", _when(m.processed_at)),
        ("expires_at", _when(m.expires_at)),
    ):
        if value:
            d[key] = value
    if m.delivery_count:
        d["delivery_count"] = m.delivery_count
    return d


def _print_message(m: Message, as_json: bool) -> None:
    if as_json:
        print(json.dumps(message_json(m)))
        return
    parts = [f"{m.queue}#{m.seq}"]
    if m.address:
        parts.append(m.address)
    if m.tuple:
        parts.append(json.dumps(fields_to_json(m.tuple)))
    if m.body:
        body = m.body.decode(errors="replace")
        parts.append(body if len(body) <= 80 else body[:77] + "...")
    print("  ".join(parts))


def _queue_json(v: Any) -> dict[str, Any]:
    s = v.spec
    return {
        "name": s.name,
        "transient": s.transient,
        "max_unprocessed": s.max_unprocessed,
        "overflow": s.overflow.value,
        "max_history": "unlimited" if s.max_history == UNLIMITED else s.max_history,
        "unprocessed": v.unprocessed,
        "history": v.history,
        "next_seq": v.next_seq,
        "waiting": v.waiting,
        "created_at": _when(v.created_at),
    }


def _print_queue(v: Any, as_json: bool) -> None:
    d = _queue_json(v)
    if as_json:
        print(json.dumps(d))
    else:
        print("  ".join(f"{k}={v}" for k, v in d.items()))


def _count(text: str) -> int:
    if text == "unlimited":
        return UNLIMITED
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {n}")
    return n


def _time_us(text: str) -> int:
    """An ISO-8601 time (UTC if no zone) as µs since the epoch."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"--from: not a seq or an ISO time: {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1_000_000)


def _pattern_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tuple",
        action="append",
        metavar="TEMPLATE",
        help="JSON template; repeat for alternatives (OR)",
    )
    p.add_argument("--address", metavar="PATTERN", help="eq:NAME, topic:a.*.#, prefix:P, all")
    p.add_argument(
        "--filter",
        metavar="EXPR",
        default="",
        help='JMS-style selector, e.g. "priority > 3 AND t[1] BETWEEN 1 AND 9"',
    )


def _templates(args: argparse.Namespace) -> list[Any] | None:
    if not args.tuple:
        return None
    return [parse_template(_json_arg(t, "--tuple")) for t in args.tuple]


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server",
        metavar="HOST:PORT",
        help="the board to talk to (default $MSGBOARD_SERVER or 127.0.0.1:7878)",
    )
    common.add_argument("--json", action="store_true", help="one JSON object per line")

    parser = argparse.ArgumentParser(prog="msgboard", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run a board")
    p.add_argument("--data", default="./msgboard-data", help="LMDB directory (default %(default)s)")
    p.add_argument("--listen", default=DEFAULT_SERVER, help="HOST:PORT (default %(default)s)")
    p.add_argument(
        "--sync",
        choices=["fsync", "weaker-no-fsync"],
        default="fsync",
        help="fsync every group commit (default); weaker-no-fsync survives a server "
        "crash but not a power loss or OS crash",
    )
    p.add_argument("--max-message-bytes", type=int, default=4 * 1024 * 1024)

    p = sub.add_parser(
        "check", help="check a data directory or snapshot offline (read-only); non-zero if damaged"
    )
    p.add_argument("dir", help="a board's --data directory or a snapshot")

    q = sub.add_parser("queue", help="create, get, list or delete queues")
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser("create", parents=[common], help="create a queue (idempotent)")
    p.add_argument("name")
    p.add_argument("--transient", action="store_true", help="in memory, gone on restart")
    p.add_argument("--max-unprocessed", type=_count, default=0, help="0: no limit")
    p.add_argument("--overflow", choices=["reject", "drop-new", "dead-letter"], default="reject")
    p.add_argument(
        "--max-history", type=_count, default=0, help="taken messages kept: N or unlimited"
    )
    p.add_argument("--dead-letter", default="", metavar="QUEUE", help="where dead letters go")
    p.add_argument(
        "--unmatched",
        choices=["hold", "discard", "dead-letter"],
        default="hold",
        help="messages no MOVE/DELETE selector matches (default hold)",
    )
    p.add_argument("--auto-delete", action="store_true", help="delete with its last selector")
    p.add_argument("--max-deliveries", type=_count, default=0, help="then dead-letter; 0: no limit")
    for action in ("get", "delete"):
        p = qs.add_parser(action, parents=[common], help=f"{action} a queue")
        p.add_argument("name")
    qs.add_parser("list", parents=[common], help="list queues")

    p = sub.add_parser("post", parents=[common], help="post a message; prints its seq")
    p.add_argument("queue")
    p.add_argument("--tuple", metavar="JSON", help="e.g. '[\"job\", 7, 2.5]'")
    p.add_argument("--address", default="")
    p.add_argument("--header", action="append", default=[], metavar="K=V")
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--reply-to", default="")
    p.add_argument("--content-type", default="")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", default="")
    body.add_argument("--body-file", metavar="FILE", help="- for standard input")

    for name, what in (("take", "remove and print"), ("read", "print without removing")):
        p = sub.add_parser(name, parents=[common], help=f"{what} matching messages")
        p.add_argument("queue")
        _pattern_args(p)
        p.add_argument("--timeout", type=float, default=0.0, help="seconds to wait (0: try once)")
        p.add_argument("--max", type=int, default=1)

    p = sub.add_parser("browse", parents=[common], help="page through a queue")
    p.add_argument("queue")
    p.add_argument(
        "--from", dest="start", default=None, help="oldest, latest, a SEQ or an ISO time"
    )
    p.add_argument("--backward", action="store_true", help="newest first")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--section", choices=["unprocessed", "history"])
    _pattern_args(p)

    q = sub.add_parser("selector", help="create, get, list or delete selectors")
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser("create", parents=[common], help="create a selector; prints its id")
    p.add_argument("source")
    p.add_argument("--op", choices=["move", "copy", "delete", "bounce"], default="move")
    p.add_argument("--to", default="", metavar="QUEUE", help="destination; none: terminal")
    _pattern_args(p)
    p.add_argument("--credit", default="0", help="N or unlimited")
    p.add_argument("--start", default="current", help="current, head, a SEQ or an ISO time")
    p.add_argument("--role", choices=["normal", "default", "overflow"], default="normal")
    p = qs.add_parser("get", parents=[common], help="show a selector")
    p.add_argument("id")
    p = qs.add_parser("delete", parents=[common], help="delete a selector")
    p.add_argument("id")
    p = qs.add_parser("list", parents=[common], help="list selectors")
    p.add_argument("queue", nargs="?", default="")

    p = sub.add_parser("watch", parents=[common], help="print deliveries as they come, acking each")
    p.add_argument("queue", nargs="?", default="")
    p.add_argument("--copy", action="store_true", help="a COPY subscription (default MOVE)")
    p.add_argument("--credit", type=int, default=100)
    p.add_argument("--selector", default="", metavar="ID", help="attach to a durable selector")
    p.add_argument("--start", default="current", help="current, head, a SEQ or an ISO time")
    p.add_argument("--max", type=int, default=0, help="exit after N deliveries")
    _pattern_args(p)

    p = sub.add_parser("stats", parents=[common], help="board and queue figures")
    p.add_argument("queue", nargs="?", default="")

    p = sub.add_parser(
        "snapshot", parents=[common], help="have the server write a consistent copy of the board"
    )
    p.add_argument("dir", help="a new or empty directory on the server (relative: to this cwd)")

    spark = argparse.ArgumentParser(add_help=False)
    spark.add_argument(
        "--master",
        metavar="URL",
        help="Spark master, e.g. spark://host:7077 (default local[*] on loopback; "
        "under spark-submit, its own)",
    )
    spark.add_argument(
        "--conf", action="append", default=[], metavar="K=V", help="a Spark setting (repeatable)"
    )
    spark.add_argument("--driver-memory", metavar="SIZE", help="e.g. 4g (spark.driver.memory)")
    full = argparse.ArgumentParser(add_help=False)
    full.add_argument(
        "--full",
        "--overwrite",
        dest="full",
        action="store_true",
        help="rebuild the dataset from this snapshot alone (trimmed history is dropped)",
    )
    dead = argparse.ArgumentParser(add_help=False)
    dead.add_argument(
        "--dead-letter",
        action="append",
        metavar="GLOB",
        help="more dead-letter queues by name (repeatable), beside those the board's "
        "queue properties name",
    )
    p = sub.add_parser(
        "export",
        parents=[spark, full],
        help="add a snapshot to a Parquet dataset by queue, section and day (Spark)",
    )
    p.add_argument("snapshot", help="a snapshot directory (msgboard snapshot)")
    p.add_argument("out", help="the dataset directory (created, or brought up to date)")
    p = sub.add_parser(
        "report", parents=[spark, dead], help="history tables, charts and an HTML page (Spark)"
    )
    p.add_argument("parquet", help="a dataset written by msgboard export")
    p.add_argument("out", help="where to write index.html, the charts and the tables")
    p = sub.add_parser(
        "nightly",
        parents=[common, spark, full, dead],
        help="snapshot, export and report in one run, safe to repeat (Spark)",
    )
    p.add_argument("snapshots", help="where snapshots go, one per UTC day: SNAPSHOTS/YYYY-MM-DD")
    p.add_argument("dataset", help="the Parquet dataset to bring up to date")
    p.add_argument("reports", help="where reports go: REPORTS/YYYY-MM-DD/index.html")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "check":
            return _check(args)
        if args.command in ("export", "report", "nightly"):
            return _spark(args)
        return _client_command(args)
    except MsgboardError as e:
        print(f"msgboard: {e.code}: {e}", file=sys.stderr)
        return 2 if e.code == "INVALID_ARGUMENT" else 1
    except KeyboardInterrupt:
        return 130


def _serve(args: argparse.Namespace) -> int:
    from msgboard.engine import Limits
    from msgboard.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    limits = Limits(max_message_bytes=args.max_message_bytes)
    asyncio.run(serve(args.data, args.listen, sync=args.sync == "fsync", limits=limits))
    return 0


def _check(args: argparse.Namespace) -> int:
    from msgboard.lmdbstore.check import check

    try:
        report = check(args.dir)
    except OSError as e:
        raise InvalidArgument(f"dir: {e}") from None
    for line in report.lines():
        print(line)
    return 0 if report.ok else 1


def _spark(args: argparse.Namespace) -> int:
    """export, report and nightly: Spark jobs, imported only here (serving
    never loads pyspark)."""
    try:
        from pyspark_msgboard.commands import run
    except ImportError as e:
        raise FailedPrecondition(
            f"the Spark side is not installed ({e}): pip install 'msgboard[spark]' "
            "(scripts/setup --dev does)"
        ) from None
    return run(args)


def _client_command(args: argparse.Namespace) -> int:
    from msgboard.client import Client, Start

    with Client(args.server) as c:
        cmd = args.command
        if cmd == "queue":
            if args.action == "create":
                v = c.create_queue(
                    args.name,
                    transient=args.transient,
                    max_unprocessed=args.max_unprocessed,
                    overflow=args.overflow,
                    max_history=args.max_history,
                    dead_letter=args.dead_letter,
                    unmatched=args.unmatched,
                    auto_delete=args.auto_delete,
                    max_deliveries=args.max_deliveries,
                )
                _print_queue(v, args.json)
            elif args.action == "get":
                _print_queue(c.get_queue(args.name), args.json)
            elif args.action == "list":
                for v in c.list_queues():
                    _print_queue(v, args.json)
            else:
                c.delete_queue(args.name)
                if args.json:
                    print(json.dumps({"deleted": args.name}))
        elif cmd == "post":
            headers = {}
            for h in args.header:
                k, sep, val = h.partition("=")
                if not sep:
                    raise InvalidArgument(f"--header: {h!r} is not KEY=VALUE")
                headers[k] = val
            if args.body_file == "-":
                body = sys.stdin.buffer.read()
            elif args.body_file:
                with open(args.body_file, "rb") as f:
                    body = f.read()
            else:
                body = args.body.encode()
            fields = parse_tuple(_json_arg(args.tuple, "--tuple")) if args.tuple else ()
            seq = c.post(
                args.queue,
                fields,
                address=args.address,
                headers=headers,
                priority=args.priority,
                body=body,
                content_type=args.content_type,
                reply_to=args.reply_to,
            )
            print(json.dumps({"queue": args.queue, "seq": seq}) if args.json else seq)
        elif cmd in ("take", "read"):
            op = c.take if cmd == "take" else c.read
            msgs = op(
                args.queue,
                _templates(args),
                address=args.address,
                filter=args.filter,
                timeout=args.timeout,
                max=args.max,
            )
            for m in msgs:
                _print_message(m, args.json)
            return 0 if msgs else 3
        elif cmd == "browse":
            kw: dict[str, Any] = {}
            if args.start in (None, "oldest", "latest"):
                default = Start.LATEST if args.backward else Start.OLDEST
                start = Start(args.start) if args.start else default
            elif args.start.isdigit():
                start, kw["seq"] = Start.SEQ, int(args.start)
            else:
                start, kw["since"] = Start.TIME, _time_us(args.start)
            page = c.browse(
                args.queue,
                start,
                reverse=args.backward,
                limit=args.limit,
                section=Section(args.section) if args.section else None,
                templates=_templates(args),
                address=args.address,
                filter=args.filter,
                **kw,
            )
            for m in page.messages:
                _print_message(m, args.json)
            if page.next_seq:
                print(
                    json.dumps({"next_seq": page.next_seq})
                    if args.json
                    else f"# more: --from {page.next_seq}",
                    file=sys.stdout if args.json else sys.stderr,
                )
        elif cmd == "selector":
            return _selector_command(c, args)
        elif cmd == "watch":
            return _watch(c, args)
        elif cmd == "snapshot":
            snap = c.snapshot(os.path.abspath(args.dir))
            d = {**asdict(snap), "taken_at": _when(snap.taken_at)}
            if args.json:
                print(json.dumps(d))
            else:
                print("  ".join(f"{k}={v}" for k, v in d.items()))
        elif cmd == "stats":
            s = c.stats(args.queue)
            board = {
                "sync": s.store.sync,
                "map_size": s.store.map_size,
                "map_used": s.store.map_used,
                "commits": s.commits,
                "committed_ops": s.committed_ops,
            }
            rows = [
                {"queue": q.name, **{k: v for k, v in asdict(q).items() if k != "name"}}
                for q in s.queues
            ]
            if args.json:
                print(json.dumps({"board": board}))
                for r in rows:
                    print(json.dumps(r))
            else:
                print("  ".join(f"{k}={v}" for k, v in board.items()))
                for r in rows:
                    print("  ".join(f"{k}={v}" for k, v in r.items()))
    return 0


def _start(text: str) -> tuple[str | int, int]:
    """--start: a position name, a seq, or an ISO time (then µs)."""
    if text in ("current", "head"):
        return text, 0
    if text.isdigit():
        return int(text), 0
    return "time", _time_us(text)


def _selector_json(v: Any) -> dict[str, Any]:
    spec = v.spec
    d: dict[str, Any] = {
        "id": v.id,
        "source": spec.source,
        "op": spec.op.value,
        "to": spec.destination or "(terminal)",
        "credit": "unlimited" if spec.unlimited_credit else spec.credit,
        "role": spec.role.value,
        "durable": v.durable,
        "attached": v.attached,
        "outstanding": v.outstanding,
        "delivered": v.delivered,
        "dropped": v.dropped,
    }
    return d


def _selector_command(c: Any, args: argparse.Namespace) -> int:
    if args.action == "create":
        unlimited = args.credit == "unlimited"
        try:
            credit = 0 if unlimited else int(args.credit)
        except ValueError:
            raise InvalidArgument(f"--credit: not a number or unlimited: {args.credit!r}") from None
        start, when = _start(args.start)
        v = c.create_selector(
            args.source,
            op=args.op,
            to=args.to,
            templates=_templates(args),
            address=args.address,
            filter=args.filter,
            credit=credit,
            unlimited_credit=unlimited,
            start=start,
            start_time=when,
            role=args.role,
        )
        print(json.dumps(_selector_json(v)) if args.json else v.id)
    elif args.action == "get":
        _print_row(_selector_json(c.get_selector(args.id)), args.json)
    elif args.action == "list":
        for v in c.list_selectors(args.queue):
            _print_row(_selector_json(v), args.json)
    else:
        c.delete_selector(args.id)
        if args.json:
            print(json.dumps({"deleted": args.id}))
    return 0


def _print_row(d: dict[str, Any], as_json: bool) -> None:
    print(json.dumps(d) if as_json else "  ".join(f"{k}={v}" for k, v in d.items()))


def _watch(c: Any, args: argparse.Namespace) -> int:
    """Prints deliveries as they come and acks each once printed."""
    if not args.queue and not args.selector:
        raise InvalidArgument("watch: give a QUEUE or --selector ID")
    start, when = _start(args.start)
    n = 0
    with c.subscribe(
        args.queue,
        _templates(args),
        address=args.address,
        filter=args.filter,
        copy=args.copy,
        credit=args.credit,
        start=start,
        start_time=when,
        selector=args.selector,
    ) as sub:
        for d in sub:
            if args.json:
                print(json.dumps({"delivery": d.id, **message_json(d.message)}), flush=True)
            else:
                _print_message(d.message, False)
                sys.stdout.flush()
            sub.ack(d)
            n += 1
            if args.max and n >= args.max:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
