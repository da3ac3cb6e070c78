"""``msgboard definitions export [FILE]`` and ``msgboard definitions import
FILE``: the board's queues, durable selectors and links as one JSON file
(``msgboard.definitions`` reads and writes it; the console's Definitions
page takes the same file). Export lists what the caller may see (a user
without ``admin`` gets no links); import creates what the board lacks,
each call needing what it needs over gRPC."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from msgboard.cli.lines import note
from msgboard.errors import PermissionDenied
from msgboard.spec import LinkSpec, Position, QueueSpec, SelectorSpec


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    q = sub.add_parser(
        "definitions", help="export or import the board's queues, selectors and links (JSON)"
    )
    qs = q.add_subparsers(dest="action", required=True)
    p = qs.add_parser("export", parents=[common], help="write the definitions as JSON")
    p.add_argument("file", nargs="?", default="-", help="the file to write (default: stdout)")
    p = qs.add_parser("import", parents=[common], help="create what a definitions file holds")
    p.add_argument("file", help="the definitions file ('-': stdin)")


class ClientTarget:
    """A board over gRPC as ``definitions.apply`` sees it."""

    def __init__(self, c: Any) -> None:
        self.c = c

    def queue_names(self) -> set[str]:
        return {v.spec.name for v in self.c.list_queues()}

    def selector_specs(self) -> list[SelectorSpec]:
        return [v.spec for v in self.c.list_selectors() if v.durable]

    def link_names(self) -> set[str]:
        return {v.spec.name for v in self.c.list_links()}

    def create_queue(self, s: QueueSpec) -> None:
        self.c.create_queue(
            s.name,
            transient=s.transient,
            max_unprocessed=s.max_unprocessed,
            overflow=s.overflow,
            max_history=s.max_history,
            dead_letter=s.dead_letter,
            unmatched=s.unmatched,
            auto_delete=s.auto_delete,
            max_deliveries=s.max_deliveries,
            dedup_window=s.dedup_window / 1e6,
            redelivery=s.redelivery,
        )

    def create_selector(self, s: SelectorSpec) -> None:
        self.c.create_selector(
            s.source,
            op=s.op,
            to=s.destination,
            pattern=s.pattern,
            credit=s.credit,
            unlimited_credit=s.unlimited_credit,
            start=s.start_seq if s.start is Position.SEQ else s.start,
            start_time=s.start_time,
            role=s.role,
            link=s.destination_link,
            source_link=s.source_link,
            translator=s.translator,
        )

    def create_link(self, s: LinkSpec) -> None:
        self.c.create_link(s.name, s.server, tls=s.tls)


def command(c: Any, args: argparse.Namespace) -> int:
    from msgboard import definitions as defs  # (protobuf: loaded once a command runs)

    if args.action == "export":
        try:
            links = [v.spec for v in c.list_links()]
        except PermissionDenied:
            links = []
            note("links left out: listing them needs admin")
        queues = [v.spec for v in c.list_queues()]
        selectors = [v.spec for v in c.list_selectors() if v.durable]
        text = defs.dumps(defs.definitions(queues, selectors, links))
        if args.file == "-":
            sys.stdout.write(text)
        else:
            with open(args.file, "w", encoding="utf-8") as out:
                out.write(text)
        return 0
    if args.file == "-":
        raw = sys.stdin.read()
    else:
        with open(args.file, encoding="utf-8") as f:
            raw = f.read()
    applied = defs.apply(defs.loads(raw), ClientTarget(c))
    if args.json:
        print(json.dumps(dataclasses.asdict(applied)))
    else:
        print(applied.text())
    return 0
