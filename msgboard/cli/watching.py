"""``msgboard watch``: print deliveries as they come, and ack them.

By default each delivery is acked once printed. With ``--manual-ack`` the
acks come from standard input instead, one ``ack ID`` or ``nack ID`` line
each (ID: the delivery id printed first on the delivery's line, ``delivery``
under ``--json``), read by a thread of their own while deliveries print. A
line naming a delivery not printed yet waits for it; one naming a delivery
already acked or nacked, or that is not ``ack ID`` / ``nack ID``, is
reported on stderr and makes the exit status 1. The end of standard input
ends the watch (no more acks can come) once the lines before it are applied;
a line still waiting for its delivery then waits ``EOF_GRACE`` seconds more,
and is reported if the delivery has not come (``printf 'ack 1\nack 2\n' |
msgboard watch Q --manual-ack --max 2`` on a queue of one message ends). With ``--nack-on-exit`` the
deliveries still outstanding when watch ends (printed and not acked, or
received and not printed) are nacked: they come back after the board's
nack backoff, with their delivery count raised, rather than at once when
the stream closes. Ctrl-C ends the watch cleanly (exit status 130).

When the board goes away (a restart), the watch waits and subscribes
again, as ``nats sub`` does (the client's backoff: ``Subscription``), and
says so on stderr: one line when the stream is lost, one when it is back.
The deliveries it had not acked come again, under new ids.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import IO, Any

from msgboard.cli.lines import print_message, report_error
from msgboard.client.subscription import Subscription
from msgboard.errors import InvalidArgument, MsgboardError, NotFound
from msgboard.spec import Delivery

#: Seconds an ack line read before the end of standard input waits, after
#: that end, for the delivery it names.
EOF_GRACE = 3.0


def watch(
    c: Any, args: argparse.Namespace, templates: Any, start: str | int, start_time: int
) -> int:
    """Runs ``msgboard watch``; returns its exit status."""
    if not args.queue and not args.selector:
        raise InvalidArgument("watch: give a QUEUE or --selector ID")
    n = 0
    outages = _Outages(c)
    with (
        c.subscribe(
            args.queue,
            templates,
            address=args.address,
            filter=args.filter,
            copy=args.copy,
            credit=args.credit,
            start=start,
            start_time=start_time,
            selector=args.selector,
            on_reconnect=outages.note,
        ) as sub,
        _CtrlC.installed(sub) as ctrl_c,
    ):
        acks = _ManualAcks(sub, sys.stdin, args.json) if args.manual_ack else None
        outages.acks = acks
        while (d := ctrl_c.next()) is not None:
            # The delivery id leads where it is needed: to ack by hand, and in JSON.
            shown = args.json or args.manual_ack
            lead: dict[str, Any] = {"delivery": d.id} if shown else {}
            print_message(d.message, args.json, **lead)
            if acks is not None:
                acks.delivered(d)
            else:
                sub.ack(d)
            n += 1
            if args.max and n >= args.max:
                if acks is not None:  # the acks of what was printed, first
                    acks.settle(ctrl_c)
                break
        if args.nack_on_exit:
            _nack_outstanding(sub, acks, args.json)
    if ctrl_c.stopped:
        return 130
    return 1 if acks is not None and acks.rejected else 0


class _Outages:
    """Says on stderr when the stream is lost and when it is back."""

    def __init__(self, c: Any) -> None:
        self._client = c
        self.acks: _ManualAcks | None = None
        self._since = 0.0

    def note(self, error: MsgboardError | None) -> None:
        if error is not None:
            self._since = time.monotonic()
            if self.acks is not None:
                self.acks.lost()
            print(
                f"# lost the board at {self._client.address} ({error.code}: {error}); "
                "subscribing again",
                file=sys.stderr,
                flush=True,
            )
        else:
            took = time.monotonic() - self._since
            print(
                f"# subscribed again to {self._client.address} after {took:.1f} s; "
                "deliveries not acked come again",
                file=sys.stderr,
                flush=True,
            )


def _nack_outstanding(sub: Subscription, acks: _ManualAcks | None, as_json: bool) -> None:
    ids = acks.outstanding() if acks is not None else []
    ids += [d.id for d in sub.unread()]
    if not ids:
        return
    sub.nack(*ids)
    if as_json:
        print(json.dumps({"nacked": ids}), flush=True)
    else:
        print(f"# nacked {len(ids)} outstanding: {' '.join(map(str, ids))}", file=sys.stderr)


class _ManualAcks:
    """``--manual-ack``: one thread reads ``ack ID`` / ``nack ID`` lines,
    another applies them in order (a line waits for its delivery while the
    reader goes on, so that the end of input is seen)."""

    def __init__(self, sub: Subscription, lines: IO[str], as_json: bool) -> None:
        self.sub = sub
        self.as_json = as_json
        self.rejected = 0
        self._cond = threading.Condition()
        self._seen = 0  # the newest delivery id printed
        self._open: dict[int, None] = {}  # printed, not yet acked or nacked
        self._done = False  # every line applied, or the watch ended
        self._lines: deque[tuple[int, str]] = deque()  # read, not applied yet
        self._eof_at: float | None = None  # when stdin ended (monotonic)
        for target, args in ((self._read, (lines,)), (self._apply_lines, ())):
            threading.Thread(target=target, args=args, daemon=True).start()

    def delivered(self, d: Delivery) -> None:
        with self._cond:
            self._seen = max(self._seen, d.id)
            self._open[d.id] = None
            self._cond.notify_all()

    def lost(self) -> None:
        """The stream was lost: what was printed comes again, under new ids."""
        with self._cond:
            self._open.clear()

    def outstanding(self) -> list[int]:
        with self._cond:
            self._done = True
            self._cond.notify_all()
            return list(self._open)

    def settle(self, ctrl_c: _CtrlC) -> None:
        """Waits until every printed delivery is acked or nacked, or stdin
        ends (or Ctrl-C)."""
        with self._cond:
            while self._open and not self._done and not ctrl_c.stopped:
                self._cond.wait(0.2)  # a timeout, so that Ctrl-C gets through

    def _read(self, lines: IO[str]) -> None:
        for n, line in enumerate(lines, 1):
            with self._cond:
                self._lines.append((n, line))
                self._cond.notify_all()
        with self._cond:
            self._eof_at = time.monotonic()
            self._cond.notify_all()

    def _apply_lines(self) -> None:
        while True:
            with self._cond:
                while not self._lines and self._eof_at is None and not self._done:
                    self._cond.wait()
                if self._done:
                    return
                if not self._lines:  # the input ended and every line is applied
                    break
                n, line = self._lines.popleft()
            if not line.strip():
                continue
            try:
                verb, did = _command(line, n)
                if not self._apply(verb, did, n):
                    return
            except MsgboardError as e:
                self.rejected += 1
                report_error(e, self.as_json)
        with self._cond:
            self._done = True
            self._cond.notify_all()
        self.sub.end()  # no more acks can come: the watch ends

    def _apply(self, verb: str, did: int, n: int) -> bool:
        """Acks or nacks delivery ``did`` (of stdin line ``n``), once it is
        printed; False once the watch has ended."""
        with self._cond:
            while did > self._seen and not self._done:
                if self._eof_at is None:
                    self._cond.wait()
                    continue
                left = self._eof_at + EOF_GRACE - time.monotonic()
                if left <= 0:
                    raise NotFound(
                        f"stdin line {n}: delivery {did} had not come {EOF_GRACE:g} s after "
                        "the end of input"
                    )
                self._cond.wait(left)
            if self._done:
                return False
            if did not in self._open:
                raise NotFound(
                    f"delivery {did}: not outstanding (already acked or nacked, or lost "
                    "with a stream the board ended)"
                )
            del self._open[did]
            if verb == "ack":
                self.sub.ack(did)
            else:
                self.sub.nack(did)
            self._cond.notify_all()
        return True


def _command(line: str, n: int) -> tuple[str, int]:
    parts = line.split()
    if len(parts) != 2 or parts[0] not in ("ack", "nack") or not parts[1].isdigit():
        got = line.strip()
        raise InvalidArgument(f"stdin line {n}: expected `ack ID` or `nack ID`, got {got!r}")
    return parts[0], int(parts[1])


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
