"""The ``msgboard`` command: run a board, and talk to one.

``msgboard serve`` runs the server; every other command is a client of
``--server HOST:PORT[,HOST:PORT...]`` (default ``$MSGBOARD_SERVER`` or
127.0.0.1:7878; given several, it finds the primary among them),
with ``--token`` / ``--tls-ca`` / ``--tls-cert`` / ``--tls-key`` for a
secured board (docs/security.md). ``--json`` prints one JSON object per
line. Tuples are JSON arrays; templates are JSON arrays in which "?int",
"?float", "?str", "?bytes", "?bool", "?null" are formals, "?" is any,
{"range": [lo, hi]} and {"prefix": "s"} are patterns. Address patterns: eq:NAME, topic:rec.pets.*,
prefix:P, all (a bare name means eq:).

A client command keeps gRPC's own C-core log lines off stderr
(``GRPC_VERBOSITY=NONE`` unless set): stderr carries the command's errors
only. Ctrl-C during a blocking call closes the channel under it, and gRPC's
poller then logs an EBADF from ``epoll_wait`` at exit, which a user would
read as a failure of a command that ended as asked (status 130).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Iterator, Sequence

from msgboard import config
from msgboard.cli import clusterstatus, definitions, moving
from msgboard.cli.cluster import add_switchover, switchover
from msgboard.cli.linking import add_link_parser
from msgboard.errors import FailedPrecondition, MsgboardError
from msgboard.spec import UNLIMITED, OverflowPolicy

DEFAULT_SERVER = "127.0.0.1:7878"

#: ``msgboard --help``: plain text, as a terminal shows it.
DESCRIPTION = "msgboard: run a board (msgboard serve), and talk to one."
EPILOG = """\
Every command but serve, user, check, export and report talks to --server
HOST:PORT (default: $MSGBOARD_SERVER, else 127.0.0.1:7878; a HOST without
a port is port 7878). Several
addresses, a,b,c (in --server or $MSGBOARD_SERVER): the command finds the
primary among them and follows it for up to --failover seconds. Those
commands, and check, take --json: one JSON object per line.

Tuples are JSON arrays: '["job", 7, 2.5]'. Templates are JSON arrays in which
"?int", "?float", "?str", "?bytes", "?bool" and "?null" match any value of
that type, "?" matches anything, {"range": [lo, hi]} and {"prefix": "s"} are
patterns, and any other value must be equal.
Address patterns: eq:NAME (or a bare NAME), topic:rec.pets.* (* one word,
# zero or more), prefix:P, all; another KIND:TEXT (regex:...) is refused.

Exit status: 0 done, 1 the board refused, 2 bad input, 3 take or read found
nothing (said on stderr too), 130 interrupted (Ctrl-C).
Help on one command: msgboard COMMAND --help."""


class _Defaults(argparse.HelpFormatter):
    """A command's help with each option's default, where it has one worth
    showing (not None, False, "" or []) and its text does not give it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            default in (None, False, "", [], argparse.SUPPRESS)
            or "default" in text
            or not (action.option_strings or action.nargs in ("?", "*"))
        ):
            return text
        return text + " (default: %(default)s)"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("msgboard")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


class _Version(argparse.Action):
    """``--version``, looked up when asked (reading the package metadata
    costs about 50 ms, which every other command would pay)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"msgboard {_version()}")
        parser.exit()


def _subparsers(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every command's parser under ``p``, at every depth."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in dict.fromkeys(action.choices.values()):
                yield sp
                yield from _subparsers(sp)


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, but an unknown option is refused by the
    command's own parser, so that its usage is shown (``msgboard serve
    --listne`` shows serve's usage, not the list of commands)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        own: argparse.ArgumentParser = getattr(args, "_parser", parser)
        own.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


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


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--server",
        metavar="HOST:PORT[,...]",
        help="the board to talk to, or several (a primary and its standbys: the "
        "primary is found among them) (default $MSGBOARD_SERVER or 127.0.0.1:7878)",
    )
    common.add_argument(
        "--failover",
        type=float,
        metavar="SECONDS",
        help="how long a call looks for the primary among the boards after a failure "
        "(default: 30 with several addresses, 0 with one)",
    )
    common.add_argument("--json", action="store_true", help="one JSON object per line")
    common.add_argument("--token", metavar="TOKEN", help="bearer token (default $MSGBOARD_TOKEN)")
    common.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="connect with TLS, trusting this CA (default $MSGBOARD_TLS_CA)",
    )
    common.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    common.add_argument("--tls-key", metavar="FILE", help="its private key")

    parser = argparse.ArgumentParser(
        prog="msgboard",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run a board")
    config.add_flags(p)  # one option per setting of msgboard.config

    p = sub.add_parser("cluster", help="a cluster of boards through etcd (docs/cluster.md)")
    clusters = p.add_subparsers(dest="cluster_command", required=True)
    add_switchover(clusters)  # msgboard/cli/cluster.py
    clusterstatus.add_parser(clusters, common)  # msgboard/cli/clusterstatus.py

    q = sub.add_parser("user", help="users of a board with a users file")
    qs = q.add_subparsers(dest="action", required=True)
    qs.add_parser(
        "token",
        help="print a fresh random token (line 1, for the user) and the users-file "
        "line holding its SHA-256 (line 2)",
    )

    p = sub.add_parser(
        "check", help="check a data directory or snapshot offline (read-only); non-zero if damaged"
    )
    p.add_argument("dir", help="a board's --data directory or a snapshot")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.add_argument(
        "--repair",
        action="store_true",
        help="on a stopped board: copy what is readable into a new data.mdb, rebuild the "
        "indexes and counters, set damaged records aside in the queue $damaged, keep the old "
        "file as data.mdb.damaged-TIME; then check again. Exits 1 unless nothing was lost",
    )
    p.add_argument(
        "--accept-rollback",
        action="store_true",
        help="with --repair: repair a data.mdb older than the board's last commit (a loss, "
        "named with its number of commits); without it such a file is refused",
    )

    q = sub.add_parser("queue", help="create, get, list, delete or purge queues")
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser("create", parents=[common], help="create a queue (idempotent)")
    p.add_argument("name", help="the queue's name")
    p.add_argument("--transient", action="store_true", help="in memory, gone on restart")
    p.add_argument(
        "--max-unprocessed",
        type=_count,
        default=0,
        metavar="N",
        help="messages waiting at most; 0: no limit",
    )
    p.add_argument(
        "--overflow",
        choices=[p.value for p in OverflowPolicy],
        default="reject",
        help="what a post to a full queue does: refused, dropped, dead-lettered, or "
        "stored with the oldest waiting message dropped (drop-head)",
    )
    p.add_argument(
        "--max-history",
        type=_count,
        default=0,
        metavar="N",
        help="taken messages kept: N or unlimited",
    )
    p.add_argument("--dead-letter", default="", metavar="QUEUE", help="where dead letters go")
    p.add_argument(
        "--unmatched",
        choices=["hold", "discard", "dead-letter"],
        default="hold",
        help="messages no MOVE/DELETE selector matches (default hold)",
    )
    p.add_argument("--auto-delete", action="store_true", help="delete with its last selector")
    p.add_argument(
        "--max-deliveries",
        type=_count,
        default=0,
        metavar="N",
        help="then dead-letter; 0: no limit",
    )
    p.add_argument(
        "--dedup-window",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a message's key is held after it has left the queue (default 120; "
        "0: only while it is on the board)",
    )
    p.add_argument(
        "--redelivery",
        metavar="INITIAL,MULTIPLIER,MAX",
        help="delay messages given back (nacked, consumer gone) by INITIAL seconds, times "
        "MULTIPLIER each time, at most MAX seconds, e.g. 1,2,300 (default: a nack waits "
        "0.1 s doubling to 5 s, a lost consumer not at all)",
    )
    for action in ("get", "delete"):
        p = qs.add_parser(action, parents=[common], help=f"{action} a queue")
        p.add_argument("name", help="the queue's name")
    qs.add_parser("list", parents=[common], help="list queues")
    moving.add_purge(qs, common)  # msgboard/cli/moving.py

    p = sub.add_parser("post", parents=[common], help="post a message; prints its seq")
    p.add_argument("queue", help="the queue to post to")
    p.add_argument("--tuple", metavar="JSON", help="e.g. '[\"job\", 7, 2.5]'")
    p.add_argument("--address", default="", help="the message's address, e.g. img.resize")
    p.add_argument(
        "--header", action="append", default=[], metavar="K=V", help="a header (repeatable)"
    )
    p.add_argument(
        "--priority",
        type=int,
        default=0,
        metavar="N",
        help="for filters (priority > 3); the queue stays FIFO",
    )
    p.add_argument("--reply-to", default="", metavar="QUEUE", help="where an answer should go")
    p.add_argument("--content-type", default="", metavar="TYPE", help="the body's media type")
    when = p.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        type=float,
        metavar="SECONDS",
        help="stored now, visible (taken, read, routed) only after this many seconds",
    )
    when.add_argument(
        "--not-before",
        metavar="TIME",
        help="stored now, visible only from this ISO time (e.g. 2026-12-01T09:00:00Z)",
    )
    p.add_argument(
        "--key",
        default="",
        metavar="KEY",
        help="an idempotency key: if the queue holds it, nothing is stored and the seq "
        "printed is the first message's (then 'duplicate')",
    )
    p.add_argument(
        "--expires-in",
        type=float,
        metavar="SECONDS",
        help="never delivered after this many seconds (dead-lettered or dropped)",
    )
    body = p.add_mutually_exclusive_group()
    body.add_argument("--body", default="", metavar="TEXT", help="the body, as text")
    body.add_argument("--body-file", metavar="FILE", help="- for standard input")
    body.add_argument(
        "--ndjson",
        metavar="FILE",
        help="post many: one JSON message a line, as read --json prints them (- for "
        "standard input), through one PostStream; prints a summary",
    )

    for name, what in (("take", "remove and print"), ("read", "print without removing")):
        p = sub.add_parser(name, parents=[common], help=f"{what} matching messages")
        p.add_argument("queue", help=f"the queue to {name} from")
        _pattern_args(p)
        p.add_argument(
            "--timeout",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="seconds to wait (0: try once)",
        )
        p.add_argument("--max", type=int, default=1, metavar="N", help="messages at most")
        if name == "take":
            p.add_argument(
                "--lease",
                type=float,
                metavar="SECONDS",
                help="keep the messages hidden until acked (msgboard ack); back if the lease "
                "runs out; prints each one's lease id after it (queue#seq  lease=ID)",
            )
    for name, what in (
        ("ack", "ack leased messages (processed for good)"),
        ("nack", "give leased messages back (after the nack backoff)"),
    ):
        p = sub.add_parser(name, parents=[common], help=what)
        p.add_argument("queue", help="the queue they were taken from")
        p.add_argument("ids", nargs="+", type=int, metavar="ID", help="lease ids (take --lease)")

    moving.add_parsers(sub, common, _pattern_args, _count)  # move, delete, release
    definitions.add_parser(sub, common)  # msgboard/cli/definitions.py
    p = sub.add_parser("browse", parents=[common], help="page through a queue")
    p.add_argument("queue", help="the queue to browse")
    p.add_argument(
        "--from", dest="start", default=None, help="oldest, latest, a SEQ or an ISO time"
    )
    p.add_argument("--backward", action="store_true", help="newest first")
    p.add_argument(
        "--limit", type=int, default=100, metavar="N", help="messages on the page at most"
    )
    p.add_argument(
        "--section",
        choices=["unprocessed", "history", "scheduled"],
        help="only this section (default all three)",
    )
    _pattern_args(p)

    q = sub.add_parser("selector", help="create, get, list or delete selectors")
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser("create", parents=[common], help="create a selector; prints its id")
    p.add_argument(
        "source", help="the queue it selects from (LINK:QUEUE: on a linked board, a pull)"
    )
    p.add_argument(
        "--op",
        choices=["move", "copy", "delete", "bounce"],
        default="move",
        help="what it does with a matching message",
    )
    p.add_argument("--to", default="", metavar="QUEUE", help="destination (LINK:QUEUE too)")
    p.add_argument("--link", default="", help="--to names a queue on this link's board")
    p.add_argument(
        "--from-link",
        default="",
        metavar="LINK",
        help="SOURCE names a queue on this link's board: a pull (SOURCE may be LINK:QUEUE too)",
    )
    p.add_argument(
        "--translate",
        default="",
        metavar="TEXT",
        help='a selector crossing a link: its translator, e.g. "prefix +site1. ; word a=b"',
    )
    _pattern_args(p)
    p.add_argument(
        "--credit",
        default="0",
        metavar="N",
        help="a terminal selector's deliveries in flight: N or unlimited (0: 100)",
    )
    p.add_argument(
        "--start", default="current", help="current, oldest (also: head), a SEQ or an ISO time"
    )
    p.add_argument(
        "--role",
        choices=["normal", "default", "overflow"],
        default="normal",
        help="default: only messages no normal selector matches; overflow: only posts "
        "that find the queue full",
    )
    p = qs.add_parser("get", parents=[common], help="show a selector")
    p.add_argument("id", help="its id (sel-N)")
    p = qs.add_parser("delete", parents=[common], help="delete a selector")
    p.add_argument("id", help="its id (sel-N)")
    p = qs.add_parser("list", parents=[common], help="list selectors")
    p.add_argument("queue", nargs="?", default="", help="only this queue's (default all)")

    q = sub.add_parser("consumer", help="list who is connected, or end one consumer (admin)")
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser("list", parents=[common], help="list the consumers, oldest first")
    p.add_argument("queue", nargs="?", default="", help="only this queue's")
    p = qs.add_parser(
        "kick", parents=[common], help="end a consumer; its outstanding messages go back"
    )
    p.add_argument("id", help="its id, as consumer list shows it (con-N)")

    add_link_parser(sub, common)

    q = sub.add_parser("damaged", help="drop a damaged record (admin)")
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser(
        "drop",
        parents=[common],
        help="drop a record that fails its check (DATA_LOSS), without decoding it",
    )
    p.add_argument("queue", help="its queue")
    p.add_argument("seq", type=int, help="its seq (with --after: the good record's before it)")
    p.add_argument(
        "--after",
        action="store_true",
        help="drop the first damaged record after seq SEQ, as a DATA_LOSS line names it",
    )

    p = sub.add_parser("watch", parents=[common], help="print deliveries as they come, acking each")
    p.add_argument("queue", nargs="?", default="", help="the queue to watch (or --selector)")
    p.add_argument("--copy", action="store_true", help="a COPY subscription (default MOVE)")
    p.add_argument(
        "--credit",
        type=int,
        default=100,
        metavar="N",
        help="deliveries in flight at most (unacked)",
    )
    p.add_argument("--selector", default="", metavar="ID", help="attach to a durable selector")
    p.add_argument(
        "--start", default="current", help="current, oldest (also: head), a SEQ or an ISO time"
    )
    p.add_argument(
        "--max", type=int, default=0, metavar="N", help="exit after N deliveries (0: never)"
    )
    p.add_argument(
        "--manual-ack",
        action="store_true",
        help="ack from standard input (`ack ID` / `nack ID` lines; ID leads each delivery's "
        "line) instead of once printed; the end of input ends the watch",
    )
    p.add_argument(
        "--nack-on-exit",
        action="store_true",
        help="nack the outstanding deliveries when watch ends, rather than leave them to "
        "go back when the stream closes",
    )
    _pattern_args(p)

    p = sub.add_parser("stats", parents=[common], help="board and queue figures")
    p.add_argument("queue", nargs="?", default="", help="only this queue (default every queue)")

    p = sub.add_parser(
        "snapshot", parents=[common], help="have the server write a consistent copy of the board"
    )
    p.add_argument(
        "dir",
        help="a new or empty directory on the server: a name under its --snapshot-dir "
        "(an open loopback board without one: relative to this cwd)",
    )

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
    spark.add_argument(
        "--spark-log",
        metavar="FILE",
        help="where Spark's own logging goes (default: DATASET.spark.log for nightly, "
        "OUT.spark.log for export and report; - for standard error)",
    )
    full = argparse.ArgumentParser(add_help=False)
    full.add_argument(
        "--full",
        "--overwrite",
        dest="full",
        action="store_true",
        help="rebuild the dataset from this snapshot alone (trimmed history is dropped)",
    )
    full.add_argument(
        "--local-rows",
        type=int,
        default=2_000_000,
        metavar="N",
        help="a night with at most N rows to decode decodes them in this process, "
        "without Spark (0: always Spark)",
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
    for sp in _subparsers(parser):
        sp.formatter_class = _Defaults
        sp.set_defaults(_parser=sp)  # the deepest command's wins: its usage on errors
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "check":
            from msgboard.cli.checking import check

            return check(args)
        if args.command == "user":
            return _user(args)
        if args.command == "cluster" and args.cluster_command == "switchover":
            return switchover(args)
        if args.command == "cluster":
            os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # before gRPC loads
            from msgboard.cli.clusterstatus import status

            return status(args)
        if args.command in ("export", "report", "nightly"):
            return _spark(args)
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # before gRPC loads
        if args.command == "definitions":
            from msgboard.cli.commands import connect

            with connect(args) as c:
                return definitions.command(c, args)
        from msgboard.cli.commands import run

        return run(args)
    except MsgboardError as e:
        from msgboard.cli.lines import report_error

        report_error(e, getattr(args, "json", False))
        return 2 if e.code == "INVALID_ARGUMENT" else 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """The reader of stdout went away (``msgboard queue list | head -3``):
    end quietly, as a command killed by SIGPIPE does (status 141), with
    stdout pointed at /dev/null so that the flush at exit does not raise
    again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13  # SIGPIPE


def _serve(args: argparse.Namespace) -> int:
    """Runs a board; a start-up failure is one line on stderr, exit 1."""
    from msgboard.engine import Limits
    from msgboard.server import logs, serve

    logging.basicConfig(level=logging.INFO, format=logs.TEXT)
    flags = {s.name: getattr(args, s.name) for s in config.SETTINGS}
    try:
        c = config.load(flags, file=args.config)
        logs.configure(c)
        limits = Limits(
            max_message_bytes=c.max_message_bytes,
            max_credit=c.max_credit,
            max_outstanding_bytes=c.max_outstanding_bytes,
            max_read_ahead_bytes=c.max_read_ahead_bytes,
        )
        if c.cluster:  # a board of a cluster (msgboard.server.node)
            from msgboard.server.node import serve_cluster

            asyncio.run(serve_cluster(c, limits=limits))
        else:
            asyncio.run(serve(c, limits=limits))
    except (MsgboardError, OSError) as e:
        print(f"msgboard serve: {e}", file=sys.stderr)
        return 1
    return 0


def _user(args: argparse.Namespace) -> int:
    from msgboard.security.auth import new_token

    token, digest = new_token()
    print(token)  # for the user: --token or $MSGBOARD_TOKEN
    print(f'token_sha256 = "{digest}"')  # for the users file, under the user's [[user]]
    return 0


def _spark(args: argparse.Namespace) -> int:
    """export, report and nightly: Spark jobs, imported only here (serving
    never loads pyspark). What they need is checked first, before nightly
    takes its snapshot: a board installed by ``scripts/serve`` has none of
    it."""
    missing = [m for m in SPARK_SIDE if not _installed(m)]
    if missing:
        raise FailedPrecondition(
            f"msgboard {args.command} needs the Spark side, which is not installed "
            f"(no {', '.join(missing)}): pip install 'msgboard[spark]'"
        )
    try:
        from pyspark_msgboard.commands import run
    except ImportError as e:
        raise FailedPrecondition(
            f"the Spark side is not installed ({e}): pip install 'msgboard[spark]' "
            "(scripts/setup --dev does)"
        ) from None
    return run(args)


def _installed(module: str) -> bool:
    """Whether ``module`` can be found, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a finder that refuses it
        return False


#: What export, report and nightly import (the ``spark`` extra), checked by
#: name before any of it runs.
SPARK_SIDE = ("numpy", "pyarrow", "pandas", "matplotlib", "tqdm", "pyspark")


if __name__ == "__main__":
    sys.exit(main())
