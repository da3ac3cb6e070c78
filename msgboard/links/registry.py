"""``Links``: a board's links to other boards, running.

The links are records of the board (``Board.create_link`` and its kin,
``engine/linked.py``); this class runs them: one ``Link`` (a connected
client, ``link.py``) per record, loaded at start and made or closed as
links are created and deleted, and one ``Forwarder`` (``forwarder.py``)
per crossing selector, found by a watch thread that compares the board's
selectors with the forwarders it runs (at once when told,
``refresh_soon``, and every ``WATCH`` seconds). The same thread watches
each link's lag (messages waiting in its selectors' outboxes and the
oldest one's age) and announces ``link.behind`` when a link falls more
than ``BEHIND`` seconds behind.

The server makes one ``Links`` per board it serves (``create_server``);
the board closes it first when it closes (``Board.before_close``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from msgboard.client import Client
from msgboard.engine import Board
from msgboard.errors import MsgboardError, NotFound
from msgboard.links.forwarder import Forwarder, Rewrite
from msgboard.links.link import Link
from msgboard.links.pull import Puller, remote_id
from msgboard.links.translate import compile_translator, push_rewrite
from msgboard.message import now_us
from msgboard.results import LinkView, Start
from msgboard.spec import LinkSpec, SelectorSpec, outbox

#: Seconds between the watch thread's looks at the selectors and lags.
WATCH = 1.0
#: Seconds closing waits, in all, for the threads to end.
CLOSING = 5.0
#: Seconds behind from which a link announces ``link.behind`` (once, until
#: it has caught up).
BEHIND = 10.0

#: Makes the rewrite of a crossing selector's messages from its spec (the
#: translator, ``msgboard.links.translate``); None: sent as they are.
Rewrites = Callable[[SelectorSpec], Rewrite | None]


class Links:
    """The running links of one board."""

    def __init__(
        self, board: Board, *, rewrites: Rewrites | None = None, behind: float = BEHIND
    ) -> None:
        """``rewrites``: a crossing selector's rewrite from its spec (its
        translator); ``behind``: seconds behind that make ``link.behind``."""
        self.board = board
        self._behind_after = behind
        self.board_id = board.board_id  # the data's: alike on a cluster's boards
        # By default the selector's translator (``translate.py``).
        self._rewrites = rewrites if rewrites is not None else push_rewrite
        self._workdir = os.path.join(board.path, "links")
        self._lock = threading.Lock()
        self._links: dict[str, Link] = {}
        self._forwarders: dict[str, Forwarder] = {}
        #: The pull selectors' pullers, by selector id (``pull.py``).
        self._pullers: dict[str, Puller] = {}
        self._behind: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="links", daemon=True)
        self._started = False

    # -- starting and stopping --------------------------------------------

    def start(self) -> Links:
        """Starts the watch thread, which opens every stored link and starts
        the forwarders. It returns at once: a replicating primary answers
        nothing (reads included) before its standbys follow it, which they
        do through the server this board is about to start."""
        self._thread.start()
        self._started = True
        self.board.before_close(self.close)
        return self

    def close(self) -> None:
        """Stops the forwarders, then the links."""
        self._stop.set()
        self._wake.set()
        # Short waits: whatever a thread is still doing fails once the
        # board is closed, and leaves its messages where a restart finds
        # them (a post sent again is a DUPLICATE there).
        deadline = time.monotonic() + CLOSING
        if self._started and self._thread.is_alive():
            self._thread.join(timeout=CLOSING)
        with self._lock:
            forwarders, self._forwarders = list(self._forwarders.values()), {}
            pullers, self._pullers = list(self._pullers.values()), {}
            links, self._links = list(self._links.values()), {}
        for f in forwarders:
            f.stop()
        for p in pullers:
            p.stop(join=False)
        for f in forwarders:
            f.join(max(0.1, deadline - time.monotonic()))
        for p in pullers:
            p.join(max(0.1, deadline - time.monotonic()))
        for link in links:
            link.close()

    # -- the calls --------------------------------------------------------

    def create(self, spec: LinkSpec) -> LinkView:
        """Creates (or finds, the same) link and connects it."""
        spec = self.board.create_link(spec)
        self._open(spec)
        return self.view(spec.name)

    def delete(self, name: str) -> None:
        """Deletes a link (FailedPrecondition while selectors cross it)."""
        self.board.delete_link(name)
        with self._lock:
            link = self._links.pop(name, None)
        if link is not None:
            link.close()

    def views(self) -> list[LinkView]:
        """Every link with its state and figures, by name."""
        with self._lock:
            names = sorted(self._links)
        out = []
        for name in names:
            with contextlib.suppress(NotFound):
                out.append(self.view(name))
        return out

    def view(self, name: str) -> LinkView:
        """One link's state and figures; NotFound if there is none."""
        with self._lock:
            link = self._links.get(name)
            sids = sorted(s for s, f in self._forwarders.items() if f.link is link)
            pulls = sorted(s for s, p in self._pullers.items() if p.link is link)
        if link is None:
            raise NotFound(f"no link named {name!r}")
        waiting, oldest = self._lag(sids)
        return LinkView(
            spec=link.spec,
            state=link.state,
            connected=link.connected,
            forwarded=link.forwarded,
            duplicates=link.duplicates,
            in_flight=link.in_flight,
            lag_messages=waiting,
            lag_seconds=max(0.0, (now_us() - oldest) / 1e6) if oldest else 0.0,
            last_error=link.last_error,
            selectors=tuple(sorted(sids + pulls)),
            since=link.since,
        )

    def client(self, name: str) -> Client:
        """The client of link ``name`` (connected or trying to)."""
        with self._lock:
            link = self._links.get(name)
        if link is None:
            raise NotFound(f"no link named {name!r}")
        return link.client

    def wait_connected(self, name: str, timeout: float) -> bool:
        """Waits until link ``name`` is connected; False if not in time."""
        with self._lock:
            link = self._links.get(name)
        if link is None:
            raise NotFound(f"no link named {name!r}")
        return link.wait_up(timeout)

    def refresh_soon(self) -> None:
        """Has the watch thread look at the selectors now (one was created
        or deleted)."""
        self._wake.set()

    # -- inside ------------------------------------------------------------

    def _open(self, spec: LinkSpec) -> None:
        with self._lock:
            if spec.name in self._links or self._stop.is_set():
                return
            link = Link(spec, self.board.emit, self._workdir)
            self._links[spec.name] = link
        link.start()

    def refresh(self) -> None:
        """Starts a forwarder for each crossing selector without one (a
        puller for each pull selector) and stops those whose selector went."""
        views = self.board.list_selectors()
        crossing = {v.id: v.spec for v in views if v.spec.destination_link}
        self._refresh_pulls({v.id: v.spec for v in views if v.spec.source_link})
        with self._lock:
            gone = [f for sid, f in self._forwarders.items() if sid not in crossing]
            for f in gone:
                del self._forwarders[f.sid]
            new = []
            for sid, spec in crossing.items():
                link = self._links.get(spec.destination_link)
                if sid in self._forwarders or link is None or self._stop.is_set():
                    continue
                rewrite = self._rewrites(spec)
                f = Forwarder(self.board, link, sid, spec, self.board_id, rewrite)
                self._forwarders[sid] = f
                new.append(f)
        for f in gone:
            f.stop()
        for f in new:
            f.start()

    def _refresh_pulls(self, pulling: dict[str, SelectorSpec]) -> None:
        with self._lock:
            gone = [p for sid, p in self._pullers.items() if sid not in pulling]
            for p in gone:
                del self._pullers[p.sid]
            new = []
            for sid, spec in pulling.items():
                link = self._links.get(spec.source_link)
                if sid in self._pullers or link is None or self._stop.is_set():
                    continue
                t = compile_translator(spec.translator)
                p = Puller(sid, spec, t, link, self.board, self.board_id, remote_id)
                self._pullers[sid] = p
                new.append(p)
        for p in gone:
            p.stop(join=False)
        for p in new:
            p.start()

    def _lag(self, sids: list[str]) -> tuple[int, int]:
        """Messages waiting in these selectors' outboxes, and when the
        oldest of them was posted there (µs; 0: none)."""
        waiting, oldest = 0, 0
        for sid in sids:
            box = outbox(sid)
            try:
                q = self.board.get_queue(box)
                if not q.unprocessed:
                    continue
                page = self.board.browse(box, Start.OLDEST, limit=1)
            except MsgboardError:
                continue  # the selector went meanwhile
            waiting += q.unprocessed
            if page.messages:
                t = page.messages[0].posted_at
                oldest = t if not oldest else min(oldest, t)
        return waiting, oldest

    def _watch(self) -> None:
        # A board with no links asks its writer nothing until told
        # (``refresh_soon``): a switchover waits for the calls in progress.
        loaded = False
        while not self._stop.is_set():
            told = self._wake.is_set()
            self._wake.clear()
            try:
                if not loaded:
                    for spec in self.board.list_links():
                        self._open(spec)
                    loaded = told = True
                if told or self._links:
                    self.refresh()
                if self._links:
                    self._watch_lag()
            except MsgboardError:
                if self.board.failure is not None:
                    return
            self._wake.wait(WATCH)

    def _watch_lag(self) -> None:
        for v in self.views():
            name = v.spec.name
            if v.lag_seconds > self._behind_after and name not in self._behind:
                self._behind.add(name)
                self.board.emit("link.behind", name, v.lag_messages, int(v.lag_seconds))
            elif not v.lag_messages:
                self._behind.discard(name)
