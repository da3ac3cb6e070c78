"""An operator's commands on waiting messages: ``queue purge``, ``move``
(with ``--to-origin``, the dead-letter resubmit), ``delete`` and
``release``, and ``lease list``. Each is one call, all or nothing; each
prints a row per message it acted on (``queue purge``: one row of counts)::

    msgboard move orders.dlq --to-origin --all      # every dead letter back
    msgboard move jobs parked --seq 4,7             # two, by seq
    msgboard move jobs parked --filter "t[1] > 9"   # the oldest matching
    msgboard delete jobs --seq 4
    msgboard lease list jobs                        # which are leased, till when
    msgboard release jobs 12                        # a leased message, now
    msgboard queue purge jobs --history
"""

from __future__ import annotations

import argparse
from typing import Any

from msgboard.cli.lines import note, print_row, templates, when
from msgboard.errors import InvalidArgument


def _seqs(text: str) -> list[int]:
    """``--seq 3`` or ``--seq 3,4,9``."""
    try:
        seqs = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a seq or a list of seqs: {text!r}") from None
    if any(s <= 0 for s in seqs):
        raise argparse.ArgumentTypeError(f"seqs are 1 or more: {text!r}")
    return seqs


def add_purge(queue_actions: Any, common: argparse.ArgumentParser) -> None:
    """Adds ``purge`` to the ``queue`` group's subparsers."""
    p = queue_actions.add_parser(
        "purge",
        parents=[common],
        help="remove every waiting message no consumer or lease holds (manage)",
    )
    p.add_argument("name", help="the queue's name")
    p.add_argument("--history", action="store_true", help="remove its history too")


def add_parsers(sub: Any, common: argparse.ArgumentParser, pattern_args: Any, count: Any) -> None:
    """Adds ``move``, ``delete`` and ``release``; ``pattern_args`` adds
    --tuple, --address and --filter, ``count`` parses --limit."""
    p = sub.add_parser(
        "move",
        parents=[common],
        help="move waiting messages to another queue, all or none (manage on both)",
    )
    p.add_argument("source", help="the queue they wait on")
    p.add_argument("destination", nargs="?", default="", help="the queue they go to")
    p.add_argument(
        "--to-origin",
        action="store_true",
        help="no destination: each back to the queue its x-dead-letter-queue header names",
    )
    _choice_args(p, pattern_args, count, "move")
    p = sub.add_parser(
        "delete",
        parents=[common],
        help="delete waiting messages, all or none (manage; a queue: queue delete)",
    )
    p.add_argument("queue", help="the queue they wait on")
    _choice_args(p, pattern_args, count, "delete")
    q = sub.add_parser("lease", help="list the leased messages (manage; every queue: admin)")
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser("list", parents=[common], help="the leases not yet acked, oldest first")
    p.add_argument("queue", nargs="?", default="", help="only this queue's (default all: admin)")
    p = sub.add_parser(
        "release",
        parents=[common],
        help="give back leased messages now, as if their leases had run out (manage)",
    )
    p.add_argument("queue", help="the queue they were taken from")
    p.add_argument("seqs", nargs="+", type=int, metavar="SEQ", help="their seqs")


def _choice_args(p: argparse.ArgumentParser, pattern_args: Any, count: Any, verb: str) -> None:
    p.add_argument(
        "--seq",
        action="append",
        type=_seqs,
        default=[],
        metavar="SEQ[,SEQ...]",
        help=f"{verb} these (repeat or list); else the oldest matching the pattern",
    )
    pattern_args(p)
    p.add_argument(
        "--all",
        action="store_true",
        help=f"{verb} the oldest waiting messages, whatever they are (up to --limit)",
    )
    p.add_argument(
        "--limit",
        type=count,
        default=0,
        metavar="N",
        help=f"{verb} at most N (default: the board's most, 10,000)",
    )


def _choice(args: argparse.Namespace) -> dict[str, Any]:
    """The messages a move or delete acts on: --seq, a pattern or --all,
    exactly one of them (the board refuses a request with none)."""
    seqs = [s for group in args.seq for s in group]
    given = args.tuple or args.address or args.filter
    if seqs and given:
        raise InvalidArgument("--seq: give seqs or a pattern (--tuple, --address, --filter)")
    if args.all == bool(seqs or given):
        raise InvalidArgument(
            f"{args.command}: give --seq, a pattern (--tuple, --address, --filter) or --all"
            + (" (--all alone)" if args.all else "")
        )
    return {
        "seqs": seqs,
        "templates": templates(args),
        "address": args.address,
        "filter": args.filter,
        "limit": args.limit,
        "all": args.all,
    }


def purge(c: Any, args: argparse.Namespace) -> int:
    got = c.purge_queue(args.name, history=args.history)
    print_row({"queue": args.name, "purged": got.purged, "history_purged": got.history}, args.json)
    return 0


def move(c: Any, args: argparse.Namespace) -> int:
    if bool(args.destination) == bool(args.to_origin):
        raise InvalidArgument(
            "destination: name the queue to move to, or give --to-origin (not both)"
        )
    moved = c.move_messages(args.source, args.destination, **_choice(args))
    for m in moved:
        print_row({"seq": m.seq, "to": m.queue, "new_seq": m.new_seq}, args.json)
    if not moved:
        note(f"move: no waiting message matched in {args.source!r}")
    return 0


def delete(c: Any, args: argparse.Namespace) -> int:
    seqs = c.delete_messages(args.queue, **_choice(args))
    for seq in seqs:
        print_row({"deleted": seq}, args.json)
    if not seqs:
        note(f"delete: no waiting message matched in {args.queue!r}")
    return 0


def leases(c: Any, args: argparse.Namespace) -> int:
    found = c.list_leases(args.queue)
    for x in found:
        row = {"lease": x.id, "queue": x.queue, "seq": x.seq}
        print_row({**row, "since": when(x.since), "until": when(x.until)}, args.json)
    if not found:
        note(f"no leases on {args.queue!r}" if args.queue else "no leases")
    return 0


def release(c: Any, args: argparse.Namespace) -> int:
    for seq in c.release_messages(args.queue, args.seqs):
        print_row({"released": seq}, args.json)
    return 0
