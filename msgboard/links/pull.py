"""Federation: a queue here that pulls from a queue on a linked board.

A pull selector (``SelectorSpec.source_link``: ``msgboard selector create
LINK:QUEUE --to LOCAL``) is run by a ``Puller``, a thread of its own beside
the board. Each round it:

1. asks how much room the local queue has (``max_unprocessed`` less what
   waits there; ``WINDOW`` when it has no limit) and waits while it has
   none: the local queue's free room is the pull's credit;
2. **reads** up to that many of the oldest messages matching the
   selector's pattern on the remote queue (a Read, waiting up to ``WAIT``
   seconds for a first): they stay there;
3. posts them here, in that order, in one durable post, each translated
   (``Translator.apply``, or ``reverse`` for a message coming home) and
   keyed ``link:<remote board id>:<remote queue>:<seq>``, its own key kept
   in ``x-origin-key``, its origin in ``x-origin-board``/``-queue``/``-seq``
   and its hop count, one more than it came with, in ``x-msgboard-hops``;
4. then **takes** exactly those seqs from the remote queue (a Take whose
   filter is ``seq IN (...)``): the remote's "ack".

A message thus leaves the remote board only once it is durable here. A
crash of either board (or a lost answer) at any step leaves it on the
remote queue, read again next round: its post here is then a DUPLICATE
(the key is held), and the Take that follows removes it. Nothing is held
by a lease or a stream that a restart would leave outstanding, so a
restarted puller never takes a newer message while an older one is still
away: the local queue gets the remote's messages in seq order, once each,
for as long as the local queue's ``dedup_window`` outlasts an outage.

The remote queue should have no other consumer: a message another
consumer takes between the Read and the Take is handled twice (here and
there). A message that comes back to the board it came from (its
``x-origin-board`` names this board: e.g. bounced on the far board to a
queue this board pulls from) is reverse-translated
(``Translator.reverse``): see ``translate.py``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from msgboard.client import Client
from msgboard.errors import (
    FailedPrecondition,
    MsgboardError,
    QueueFull,
    QueueNotFound,
    Unavailable,
)
from msgboard.links.forwarder import parts
from msgboard.links.translate import Origin, Translator
from msgboard.message import Message, build
from msgboard.results import QueueView
from msgboard.spec import (
    HOPS,
    ORIGIN_BOARD,
    ORIGIN_KEY,
    ORIGIN_QUEUE,
    ORIGIN_SEQ,
    Disposition,
    Receipt,
    SelectorSpec,
)

log = logging.getLogger("msgboard.links")

#: Most messages one round pulls (and the credit of a local queue with no
#: ``max_unprocessed``).
WINDOW = 100
#: Seconds a Read waits on the remote queue for a first message.
WAIT = 2.0
#: Seconds between looks at a full local queue; backoff after a failure.
FULL_WAIT = 0.1
BACKOFF = 0.1
BACKOFF_MAX = 5.0


class Local(Protocol):
    """What a puller needs of the board here (``msgboard.engine.Board``)."""

    def get_queue(self, name: str) -> QueueView: ...

    def post_receipts(self, queue: str, messages: Sequence[Message]) -> list[Receipt]: ...


class Remote(Protocol):
    """What a puller needs of its link (``link.Link``)."""

    client: Client

    def wait_up(self, timeout: float) -> bool: ...

    def counted(self, forwarded: int, duplicates: int) -> None: ...

    def refused(self, sid: str, e: BaseException) -> None: ...

    def accepted(self, sid: str) -> None: ...


class LocalGone(Exception):
    """The local queue a puller fills is gone (its selector goes with it):
    the puller stops."""


class LocalFailed(Exception):
    """The board here could not answer (closing, or a group that failed):
    the puller tries again after a backoff, the link not blamed."""


def room(view: QueueView) -> int:
    """How many messages a pull may bring to the queue ``view`` shows now."""
    limit = view.spec.max_unprocessed
    if not limit:
        return WINDOW
    return max(0, min(WINDOW, limit - view.unprocessed))


def pull_key(board: str, queue: str, seq: int) -> str:
    """The key a pulled message is posted under here."""
    return Origin(board, queue, seq).key()


def arrived(m: Message, board: str, queue: str, here: str, translator: Translator) -> Message:
    """``m`` (seq ``m.seq`` of ``queue`` on the remote board ``board``) as
    it is posted here, on the board whose id is ``here``."""
    if m.headers.get(ORIGIN_BOARD) == here:
        m = translator.reverse(m)
    else:
        m = translator.apply(m, Origin(board, queue, m.seq))
    headers = dict(m.headers)
    hops = headers.get(HOPS, "")
    headers[HOPS] = str((int(hops) if hops.isdigit() and len(hops) < 6 else 0) + 1)
    if m.key and ORIGIN_KEY not in headers:  # a producer's own key, not a link's
        headers[ORIGIN_KEY] = m.key
    headers[ORIGIN_BOARD] = board
    headers[ORIGIN_QUEUE] = queue
    headers[ORIGIN_SEQ] = str(m.seq)
    return build(
        m.tuple,
        m.address,
        m.priority,
        headers,
        m.reply_to,
        m.expires_at,
        m.content_type,
        m.body,
        "",
        0,
        0,
        0,
        0,
        m.section,
        key=pull_key(board, queue, m.seq),
    )


def remote_id(client: Client, queue: str) -> str:
    """The id of the board ``client`` reaches, as its Stats of ``queue``
    (which the link may read) say; FailedPrecondition if it says none."""
    board = client.stats(queue).board_id
    if not board:
        raise FailedPrecondition(
            "the linked board does not say its id (an older version): nothing is pulled"
        )
    return board


def seq_filter(seqs: Sequence[int]) -> str:
    """The filter of the Take that removes exactly ``seqs``."""
    return f"seq IN ({', '.join(map(str, seqs))})"


class Puller:
    """Runs one pull selector ``sid`` (``spec``: ``source`` on the board of
    link ``spec.source_link`` into the local ``destination``), in a thread."""

    def __init__(
        self,
        sid: str,
        spec: SelectorSpec,
        translator: Translator,
        link: Remote,
        local: Local,
        here: str,
        remote_id: Callable[[Client, str], str],
    ) -> None:
        """``here``: this board's id; ``remote_id(client, queue)``: the
        remote board's id, asked of it once per connection."""
        self.sid = sid
        self.spec = spec
        self.translator = translator
        self.link = link
        self._local = local
        self._here = here
        self._remote_id = remote_id
        self._stop = threading.Event()
        self._random = random.Random()
        #: Messages posted here and taken there; resends found held here.
        self.pulled = 0
        self.duplicates = 0
        #: Rounds that found the local queue full.
        self.waited = 0
        self.last_error = ""
        self._thread = threading.Thread(target=self._run, name=f"pull-{sid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, *, join: bool = True) -> None:
        """Stops after the round in progress (a Read waits at most ``WAIT``)."""
        self._stop.set()
        if join:
            self.join(WAIT + 30)

    def join(self, timeout: float) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        delay = BACKOFF
        board = ""
        while not self._stop.is_set():
            try:
                # A link this puller holds down (its last call failed) is
                # tried again after the backoff, not waited for: only a
                # call of its own clears what it reported.
                if not self.last_error and not self.link.wait_up(1.0):
                    continue
                client = self.link.client
                if not board:
                    board = self._remote_id(client, self.spec.source)
                self.round(client, board)
                if self.last_error:
                    self.last_error = ""
                    self.link.accepted(self.sid)
                delay = BACKOFF
            except QueueFull:
                self._stop.wait(FULL_WAIT)  # a local post raced it to the room
            except LocalGone:
                log.info("pull %s: queue %s is gone; stopping", self.sid, self.spec.destination)
                return
            except LocalFailed as e:
                self.last_error = f"here: {e}"
                self._stop.wait(delay)
                delay = min(BACKOFF_MAX, delay * 2)
            except Unavailable as e:  # the remote board's (the local's are LocalFailed)
                if self._stop.is_set():
                    return
                self._failed(e, delay)
                delay = min(BACKOFF_MAX, delay * 2)
                board = ""  # the remote may be another board once it is back
            except Exception as e:  # the remote's refusals, the channel's failures
                self._failed(e, delay)
                delay = min(BACKOFF_MAX, delay * 2)
                board = ""

    def _failed(self, e: BaseException, delay: float) -> None:
        self.last_error = f"{e.code}: {e}" if isinstance(e, MsgboardError) else repr(e)
        self.link.refused(self.sid, e)
        self._stop.wait(delay * (0.5 + self._random.random()))

    def round(self, client: Client, board: str) -> bool:
        """One round (the module's docstring); False if it moved nothing."""
        spec = self.spec
        try:
            credit = room(self._local.get_queue(spec.destination))
        except QueueNotFound:
            raise LocalGone() from None
        except Unavailable as e:
            raise LocalFailed(str(e)) from None
        if credit <= 0:
            self.waited += 1
            self._stop.wait(FULL_WAIT)
            return False
        p = spec.pattern
        found = client.read(
            spec.source,
            list(p.templates) or None,
            address=p.address,
            filter=p.filter,
            timeout=WAIT,
            max=credit,
        )
        if not found:
            return True
        out = [arrived(m, board, spec.source, self._here, self.translator) for m in found]
        try:
            receipts = [
                r for part in parts(out) for r in self._local.post_receipts(spec.destination, part)
            ]
        except QueueNotFound:
            raise LocalGone() from None
        except Unavailable as e:  # closing, or its group failed: read again later
            raise LocalFailed(str(e)) from None
        dup = sum(1 for r in receipts if r.disposition is Disposition.DUPLICATE)
        seqs = [m.seq for m in found]
        client.take(spec.source, filter=seq_filter(seqs), max=len(seqs))
        self.pulled += len(seqs) - dup
        self.duplicates += dup
        self.link.counted(len(seqs) - dup, dup)
        return True
