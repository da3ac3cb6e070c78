"""The client commands of ``msgboard``: what each does with a ``Client``,
and how it prints what it gets (plain lines, or one JSON object per line
with ``--json``). ``msgboard.cli`` parses the command line and calls
``run`` for every command that talks to a board.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from msgboard.associative import fields_to_json, parse_template, parse_tuple
from msgboard.errors import InvalidArgument, RelativePath
from msgboard.message import Message, Section, to_datetime
from msgboard.spec import UNLIMITED, Delivery

if TYPE_CHECKING:
    from msgboard.client import Client


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


def _time_us(text: str) -> int:
    """An ISO-8601 time (UTC if no zone) as µs since the epoch."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"--from: not a seq or an ISO time: {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1_000_000)


def _templates(args: argparse.Namespace) -> list[Any] | None:
    if not args.tuple:
        return None
    return [parse_template(_json_arg(t, "--tuple")) for t in args.tuple]


def connect(args: argparse.Namespace) -> Client:
    """A client of ``args.server`` with the command line's credentials."""
    from msgboard.client import Client

    return Client(
        args.server,
        token=args.token,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )


def run(args: argparse.Namespace) -> int:
    """Runs a client command (every command but serve, user, check, export,
    report and nightly) against ``args.server``."""
    from msgboard.client import Start
    from msgboard.tls import is_loopback

    with connect(args) as c:
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
            m = Message(
                tuple=fields,
                address=args.address,
                priority=args.priority,
                headers=headers,
                reply_to=args.reply_to,
                content_type=args.content_type,
                body=body,
            )
            [got] = c.post_receipts(args.queue, [m])
            fate = got.disposition.value
            if args.json:
                print(json.dumps({"queue": args.queue, "seq": got.seq, "disposition": fate}))
            else:  # the seq first, so that scripts can keep it; 0 says why
                print(got.seq or f'0 {fate} (queue "{args.queue}" is full)')
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
        elif cmd == "consumer":
            return _consumer_command(c, args)
        elif cmd == "watch":
            return _watch(c, args)
        elif cmd == "snapshot":
            try:
                snap = c.snapshot(args.dir)
            except RelativePath:
                # An open board with no snapshot dir: relative to this
                # directory, if the board runs on this machine.
                if not is_loopback(c.address):
                    raise
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


def _consumer_json(v: Any) -> dict[str, Any]:
    d = asdict(v)
    d["credit"] = "unlimited" if v.credit == float("inf") else int(v.credit)
    d["since"] = _when(v.since)
    return d


def _consumer_command(c: Any, args: argparse.Namespace) -> int:
    if args.action == "list":
        for v in c.list_consumers(args.queue):
            _print_row(_consumer_json(v), args.json)
    else:
        _print_row(_consumer_json(c.kick_consumer(args.id)), args.json)
    return 0


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
    """Prints deliveries as they come and acks each once printed; Ctrl-C
    ends it cleanly (exit status 130)."""
    if not args.queue and not args.selector:
        raise InvalidArgument("watch: give a QUEUE or --selector ID")
    start, when = _start(args.start)
    n = 0
    with (
        c.subscribe(
            args.queue,
            _templates(args),
            address=args.address,
            filter=args.filter,
            copy=args.copy,
            credit=args.credit,
            start=start,
            start_time=when,
            selector=args.selector,
        ) as sub,
        _CtrlC.installed(sub) as ctrl_c,
    ):
        while (d := ctrl_c.next()) is not None:
            if args.json:
                print(json.dumps({"delivery": d.id, **message_json(d.message)}), flush=True)
            else:
                _print_message(d.message, False)
                sys.stdout.flush()
            sub.ack(d)
            n += 1
            if args.max and n >= args.max:
                break
    return 130 if ctrl_c.stopped else 0


class _CtrlC:
    """Ctrl-C for a consumer: the first one stops it cleanly, a second one
    interrupts. A KeyboardInterrupt raised inside a gRPC read would leave the
    call unusable, its locks possibly held (a 40-line traceback or a hang),
    so the handler raises nothing: it half-closes the stream if the consumer
    is blocked reading it (the board applies the acks sent and the read
    ends), and otherwise lets the delivery in hand be printed and acked
    before the consumer stops."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub
        self.stopped = False
        self._reading = False

    @classmethod
    @contextlib.contextmanager
    def installed(cls, sub: Any) -> Iterator[_CtrlC]:
        """The handler, for SIGINT while inside (main thread only)."""
        ctrl_c = cls(sub)
        if threading.current_thread() is not threading.main_thread():
            yield ctrl_c
            return
        previous = signal.signal(signal.SIGINT, ctrl_c._handle)
        try:
            yield ctrl_c
        finally:
            signal.signal(signal.SIGINT, previous)

    def _handle(self, signum: int, frame: object) -> None:
        if self.stopped:
            raise KeyboardInterrupt
        self.stopped = True
        if self._reading:
            self.sub.end()

    def next(self) -> Delivery | None:
        """The next delivery; None once the stream ends or Ctrl-C stopped it."""
        self._reading = True
        try:
            if self.stopped:
                return None
            d: Delivery | None = next(self.sub, None)
            return None if self.stopped else d
        finally:
            self._reading = False
