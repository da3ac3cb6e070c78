"""The client commands of ``msgboard``: what each does with a ``Client``,
and how it prints what it gets (plain lines, or one JSON object per line
with ``--json``). ``msgboard.cli.main`` parses the command line and calls
``run`` for every command that talks to a board.
"""

from __future__ import annotations

import argparse
import difflib
import enum
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from msgboard.associative import parse_tuple
from msgboard.cli import moving
from msgboard.cli.lines import (
    json_arg,
    note,
    print_message,
    print_row,
    print_rows,
    report_error,
    templates,
    time_us,
    when,
)
from msgboard.cli.linking import link_command, split_link
from msgboard.errors import InvalidArgument, MsgboardError, QueueExists, RelativePath
from msgboard.message import Message, Section, now_us
from msgboard.spec import (
    DEDUP_WINDOW,
    UNLIMITED,
    Disposition,
    OverflowPolicy,
    QueueSpec,
    Redelivery,
    UnmatchedPolicy,
    differences,
)

if TYPE_CHECKING:
    from msgboard.client import Client

#: Every RPC of the Board service and the msgboard commands that make it
#: (docs/operating.md shows this table; a test checks it against the proto
#: and the parser).
RPC_COMMANDS: dict[str, tuple[str, ...]] = {
    "CreateQueue": ("queue create",),
    "GetQueue": ("queue get",),
    "ListQueues": ("queue list",),
    "DeleteQueue": ("queue delete",),
    "Post": ("post",),
    "PostStream": ("post --ndjson",),
    "Take": ("take", "take --lease"),
    "Read": ("read",),
    "Browse": ("browse",),
    "Ack": ("ack", "nack"),
    "Stats": ("stats",),
    "CreateSelector": ("selector create",),
    "GetSelector": ("selector get",),
    "ListSelectors": ("selector list",),
    "DeleteSelector": ("selector delete",),
    "Subscribe": ("watch",),
    "Snapshot": ("snapshot",),
    "ListConsumers": ("consumer list",),
    "KickConsumer": ("consumer kick",),
    "DropDamaged": ("damaged drop",),
    "CreateLink": ("link create",),
    "ListLinks": ("link list",),
    "DeleteLink": ("link delete",),
    "PurgeQueue": ("queue purge",),
    "MoveMessages": ("move", "move --to-origin"),
    "DeleteMessages": ("delete",),
    "ReleaseMessages": ("release",),
    "ListLeases": ("lease list",),
}


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
        "created_at": when(v.created_at),
    }


def _print_queue(v: Any, as_json: bool) -> None:
    d = _queue_json(v)
    if as_json:
        print(json.dumps(d))
    else:
        print("  ".join(f"{k}={v}" for k, v in d.items()))


def connect(args: argparse.Namespace) -> Client:
    """A client of ``args.server`` with the command line's credentials."""
    from msgboard.client import Client

    return Client(
        args.server,
        token=args.token,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        failover=getattr(args, "failover", None),
    )


def _create_queue(c: Client, args: argparse.Namespace) -> Any:
    """queue create. The board names the properties that differ from an
    existing queue's as the proto does (``max_history 1000 (asked: 500)``);
    said here as the flags that set them (``--max-history 1000``)."""
    redelivery = _redelivery(args.redelivery)
    try:
        return c.create_queue(
            args.name,
            transient=args.transient,
            max_unprocessed=args.max_unprocessed,
            overflow=args.overflow,
            max_history=args.max_history,
            dead_letter=args.dead_letter,
            unmatched=args.unmatched,
            auto_delete=args.auto_delete,
            max_deliveries=args.max_deliveries,
            dedup_window=args.dedup_window,
            redelivery=redelivery,
        )
    except QueueExists as e:
        try:
            have = c.get_queue(args.name).spec
        except MsgboardError:
            raise e from None  # gone meanwhile: the board's words stand
        window = args.dedup_window
        asked = QueueSpec(
            args.name,
            args.transient,
            args.max_unprocessed,
            OverflowPolicy(args.overflow),
            args.max_history,
            args.dead_letter,
            UnmatchedPolicy(args.unmatched),
            args.auto_delete,
            args.max_deliveries,
            DEDUP_WINDOW if window is None else round(window * 1_000_000),
            redelivery,
        )
        said = differences(have, asked, flag_words)
        raise QueueExists(e.queue, f'queue "{args.name}" exists with {said}') from None


def flag_words(field: str, have: object, asked: object) -> str:
    """One property that differs, as the ``queue create`` flag that sets
    it: ``--max-history 1000 (asked: 500)``, ``no --transient (asked:
    --transient)``, ``--dead-letter dlq (asked: none)``."""
    flag = "--" + field.replace("_", "-")
    if isinstance(have, bool):
        return f"{flag if have else 'no ' + flag} (asked: {flag if asked else 'no ' + flag})"

    def value(v: object) -> object:
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, Redelivery):  # as --redelivery takes it: seconds
            return f"{v.initial / 1e6:g},{v.multiplier:g},{v.most / 1e6:g}"
        if field == "dedup_window" and isinstance(v, int):
            return f"{v / 1e6:g}"
        if v == UNLIMITED:
            return "unlimited"
        return "none" if v in ("", None) else v

    return f"{flag} {value(have)} (asked: {value(asked)})"


def run(args: argparse.Namespace) -> int:
    """Runs a client command (every command but serve, user, check, export,
    report and nightly) against ``args.server``."""
    from msgboard.client import Start
    from msgboard.tls import is_loopback

    with connect(args) as c:
        cmd = args.command
        if cmd == "queue":
            if args.action == "create":
                _print_queue(_create_queue(c, args), args.json)
            elif args.action == "get":
                _print_queue(c.get_queue(args.name), args.json)
            elif args.action == "list":
                queues = c.list_queues()
                print_rows([_queue_json(v) for v in queues], args.json)
                if not queues:
                    note("no queues")
            elif args.action == "purge":
                return moving.purge(c, args)
            else:
                c.delete_queue(args.name)
                if args.json:
                    print(json.dumps({"deleted": args.name}))
        elif cmd == "post":
            return _post(c, args)
        elif cmd == "lease":
            return moving.leases(c, args)
        elif cmd in ("move", "delete", "release"):
            return {"move": moving.move, "delete": moving.delete, "release": moving.release}[cmd](
                c, args
            )
        elif cmd in ("ack", "nack"):
            return _ack(c, args)
        elif cmd in ("take", "read"):
            return _take(c, args)
        elif cmd == "browse":
            kw: dict[str, Any] = {}
            if args.start in (None, "oldest", "latest"):
                default = Start.LATEST if args.backward else Start.OLDEST
                start = Start(args.start) if args.start else default
            elif args.start.isdigit():
                start, kw["seq"] = Start.SEQ, int(args.start)
            else:
                start, kw["since"] = Start.TIME, time_us(args.start, "--from")
            page = c.browse(
                args.queue,
                start,
                reverse=args.backward,
                limit=args.limit,
                section=Section(args.section) if args.section else None,
                templates=templates(args),
                address=args.address,
                filter=args.filter,
                **kw,
            )
            for m in page.messages:
                print_message(m, args.json)
            warn_filter(args.filter, page.messages)
            if page.next_seq:
                print(
                    json.dumps({"next_seq": page.next_seq})
                    if args.json
                    else f"# more: --from {page.next_seq}",
                    file=sys.stdout if args.json else sys.stderr,
                )
        elif cmd == "selector":
            return _selector_command(c, args)
        elif cmd == "consumer":
            return _consumer_command(c, args)
        elif cmd == "link":
            return link_command(c, args)
        elif cmd == "damaged":
            seq = c.drop_damaged(args.queue, args.seq, after=args.after)
            print_row({"queue": args.queue, "dropped": seq}, args.json)
        elif cmd == "watch":
            from msgboard.cli.watching import watch

            return watch(c, args, templates(args), *_start(args.start))
        elif cmd == "snapshot":
            try:
                snap = c.snapshot(args.dir)
            except RelativePath:
                # An open board with no snapshot dir: relative to this
                # directory, if the board runs on this machine.
                if not is_loopback(c.address):
                    raise
                snap = c.snapshot(os.path.abspath(args.dir))
            d = {**asdict(snap), "taken_at": when(snap.taken_at)}
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
            else:
                print("  ".join(f"{k}={v}" for k, v in board.items()))
                if sys.stdout.isatty() and rows:
                    print()
            print_rows(rows, args.json)
    return 0


def _start(text: str) -> tuple[str | int, int]:
    """--start: a position name (``oldest``, or ``head`` as before), a seq,
    or an ISO time (then µs)."""
    if text in ("current", "head"):
        return text, 0
    if text == "oldest":
        return "head", 0
    if text.isdigit():
        return int(text), 0
    return "time", time_us(text, "--start")


def _selector_json(v: Any) -> dict[str, Any]:
    spec = v.spec
    d: dict[str, Any] = {
        "id": v.id,
        "source": f"{spec.source_link}:{spec.source}" if spec.source_link else spec.source,
        "op": spec.op.value,
        "to": (
            f"{spec.destination_link}:{spec.destination}"
            if spec.destination_link
            else spec.destination or "(terminal)"
        ),
        "credit": "unlimited" if spec.unlimited_credit else spec.credit,
        "role": spec.role.value,
        "durable": v.durable,
        "attached": v.attached,
        "outstanding": v.outstanding,
        "delivered": v.delivered,
        "dropped": v.dropped,
    }
    if spec.translator:
        d["translator"] = spec.translator
    return d


def _consumer_json(v: Any) -> dict[str, Any]:
    d = asdict(v)
    d["credit"] = "unlimited" if v.credit == float("inf") else int(v.credit)
    d["since"] = when(v.since)
    return d


def _consumer_command(c: Any, args: argparse.Namespace) -> int:
    if args.action == "list":
        consumers = c.list_consumers(args.queue)
        for v in consumers:
            print_row(_consumer_json(v), args.json)
        if not consumers:
            note(f"no consumers of {args.queue!r}" if args.queue else "no consumers")
    else:
        print_row(_consumer_json(c.kick_consumer(args.id)), args.json)
    return 0


def _selector_command(c: Any, args: argparse.Namespace) -> int:
    if args.action == "create":
        unlimited = args.credit == "unlimited"
        try:
            credit = 0 if unlimited else int(args.credit)
        except ValueError:
            raise InvalidArgument(f"--credit: not a number or unlimited: {args.credit!r}") from None
        start, when = _start(args.start)
        link, to = (args.link, args.to) if args.link else split_link(c, args.to)
        if args.from_link:
            source_link, source = args.from_link, args.source
        elif link:  # a selector crosses one link at most
            source_link, source = "", args.source
        else:
            source_link, source = split_link(c, args.source)
        v = c.create_selector(
            source,
            op=args.op,
            to=to,
            link=link,
            source_link=source_link,
            translator=args.translate,
            templates=templates(args),
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
        print_row(_selector_json(c.get_selector(args.id)), args.json)
    elif args.action == "list":
        for v in c.list_selectors(args.queue):
            print_row(_selector_json(v), args.json)
    else:
        c.delete_selector(args.id)
        if args.json:
            print(json.dumps({"deleted": args.id}))
    return 0


def _expires_at(args: argparse.Namespace) -> int:
    """--expires-in SECONDS as an expiry time (µs); 0: none."""
    if args.expires_in is None:
        return 0
    if args.expires_in <= 0:
        raise InvalidArgument(f"--expires-in: must be positive seconds (got {args.expires_in})")
    return now_us() + int(args.expires_in * 1_000_000)


def _redelivery(text: str | None) -> Redelivery | None:
    """--redelivery INITIAL,MULTIPLIER,MAX (seconds) as a policy."""
    if text is None:
        return None
    parts = text.split(",")
    try:
        initial, multiplier, most = (float(p) for p in parts)
    except ValueError:
        raise InvalidArgument(
            f"--redelivery: {text!r} is not INITIAL,MULTIPLIER,MAX (e.g. 1,2,300)"
        ) from None
    return Redelivery(round(initial * 1_000_000), multiplier, round(most * 1_000_000))


def _not_before(args: argparse.Namespace) -> int:
    """--delay SECONDS or --not-before TIME as a time (µs); 0: none."""
    if args.not_before:
        return time_us(args.not_before, "--not-before")
    if args.delay is None:
        return 0
    if args.delay < 0:
        raise InvalidArgument(f"--delay: must not be negative seconds (got {args.delay})")
    return now_us() + int(args.delay * 1_000_000)


def _post(c: Any, args: argparse.Namespace) -> int:
    if args.ndjson:
        from msgboard.cli.bulk import post_ndjson

        single = [
            flag
            for flag, value in (
                ("--tuple", args.tuple),
                ("--address", args.address),
                ("--header", args.header),
                ("--priority", args.priority),
                ("--reply-to", args.reply_to),
                ("--content-type", args.content_type),
                ("--key", args.key),
                ("--delay", args.delay),
                ("--not-before", args.not_before),
            )
            if value
        ]
        if single:
            raise InvalidArgument(
                f"{single[0]}: a single post's; with --ndjson each line gives its own"
            )

        posted = post_ndjson(c, args.queue, args.ndjson, expires_at=_expires_at(args))
        if args.json:
            print(json.dumps({"queue": args.queue, **posted.json()}))
        else:
            print(posted.line())
        return 0
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
    fields = parse_tuple(json_arg(args.tuple, "--tuple")) if args.tuple else ()
    m = Message(
        tuple=fields,
        address=args.address,
        priority=args.priority,
        headers=headers,
        reply_to=args.reply_to,
        expires_at=_expires_at(args),
        content_type=args.content_type,
        body=body,
        key=args.key,
        not_before=_not_before(args),
    )
    [got] = c.post_receipts(args.queue, [m])
    fate = got.disposition.value
    if args.json:
        print(json.dumps({"queue": args.queue, "seq": got.seq, "disposition": fate}))
    elif got.disposition is Disposition.DUPLICATE:  # the seq first: the one holding the key
        print(f"{got.seq} duplicate (key {args.key!r} is held by seq {got.seq})")
    else:  # the seq first, so that scripts can keep it; 0 says why
        print(got.seq or f'0 {fate} (queue "{args.queue}" is full)')
    return 0


def _take(c: Any, args: argparse.Namespace) -> int:
    """take and read; take --lease prints each message's lease id after
    its ``queue#seq`` (``lease=ID``)."""
    kw = {"address": args.address, "filter": args.filter, "timeout": args.timeout, "max": args.max}
    if args.command == "take" and args.lease is not None:
        if args.lease <= 0:
            raise InvalidArgument(f"--lease: must be positive seconds (got {args.lease})")
        leased = c.take_leased(args.queue, templates(args), lease=args.lease, **kw)
        for d in leased:
            print_message(d.message, args.json, tags={"lease": d.id})
        warn_filter(args.filter, [d.message for d in leased])
        if not leased:
            _found_nothing(args)
        return 0 if leased else 3
    op = c.take if args.command == "take" else c.read
    msgs = op(args.queue, templates(args), **kw)
    for m in msgs:
        print_message(m, args.json)
    warn_filter(args.filter, msgs)
    if not msgs:
        _found_nothing(args)
    return 0 if msgs else 3


def _found_nothing(args: argparse.Namespace) -> None:
    """Exit status 3 says it to a script; stderr says it to a person (and
    to a script's log), terminal or not."""
    waited = f" within {args.timeout:g} s" if args.timeout else ""
    print(
        f"msgboard: {args.command}: no message matches in {args.queue!r}{waited} (exit status 3)",
        file=sys.stderr,
        flush=True,
    )


def warn_filter(text: str, msgs: Sequence[Message]) -> None:
    """Warns once, on stderr, when ``text`` (a --filter) reads bare names
    as headers that none of ``msgs`` (what the command found) has: most
    often a misspelt message field (``adress = 'x'`` reads the header
    ``adress``, which matches nothing without an error)."""
    if not text:
        return
    from msgboard.associative.filter import FIELDS, compile_filter

    try:
        bare = compile_filter(text).bare
    except InvalidArgument:
        return  # the board said what is wrong
    missing = [n for n in bare if not any(n in m.headers for m in msgs)]
    if not missing:
        return
    hints = []
    for name in missing:
        close = difflib.get_close_matches(name, FIELDS, 1)
        hints.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    print(
        f"msgboard: warning: --filter reads {', '.join(hints)} as a header, which no message "
        f"found has; the message fields are {', '.join(FIELDS)}, and a header is "
        f"header['{missing[0]}']",
        file=sys.stderr,
        flush=True,
    )


def _ack(c: Any, args: argparse.Namespace) -> int:
    """ack and nack: one Ack call; acks are per lease, so each id is
    answered on its own, in the order given (a line per lease applied on
    stdout, an error per lease refused on stderr); 1 if any was refused."""
    acked = c.ack(args.queue, args.ids, nack=args.command == "nack")
    done = set(acked.ids)
    for lid in dict.fromkeys(args.ids):  # a lease given twice is answered once
        if lid in acked.rejected:
            report_error(acked.rejected[lid], args.json, about={"lease": lid})
        elif lid in done:
            if args.json:
                print(json.dumps({"lease": lid, args.command + "ed": True}), flush=True)
            else:
                print(f"{args.command}ed {lid}", flush=True)
    return 1 if acked.rejected else 0
