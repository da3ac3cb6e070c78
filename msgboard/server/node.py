"""``msgboard serve --cluster NAME --etcd URL[,URL...]``: a board of a
cluster, ``Node`` (docs/cluster.md; docs/plans/cluster/DESIGN.md §5, §7).

A node starts as a standby: its directory opened as a standby's store, a
``Replica`` following whoever ``PrimaryWatch`` names (an empty directory
seeds itself), its position published under ``members/``
(``Membership``), and a ``Leadership`` campaigning with the promotion
rule (``members.promotable``): before it judges, a candidate stops
following and publishes its final position. One port and one gRPC server
throughout; its ``Switchboard`` hands each call to the pipeline of the
node's mode:

- **standby**: every Board call answers NotPrimary with the primary's
  address (with none while none is known: clients try another board), as
  ``serve --standby-of``'s;
- **primary**: the board's own services (``board_pipeline``), whose
  ``RoleCheck`` answers NoLease the moment ``Leadership.term()`` is None,
  reads included, and whose store commits nothing without the term (the
  commit fence: ``Log.fence`` raises, and every entry carries the epoch).

Elected, the node stops its Replica, closes the standby's store, opens the
directory as a board (the restart path, as after kill -9), and only then
serves it; the gate (``InSync``) counts only standbys of the in-sync set it
keeps in etcd. Fenced or resigned, it stops answering at once and closes
the board; it may lead again while the in-sync set is still the one it
wrote and it holds the data it led with (``led``, a file in its
directory naming the first epoch it led with that data, also after a
restart: it holds all it answered). Once another board leads, a board
that led follows it with its data: a log that is a prefix of the new
primary's goes on from where it is; one the primary refuses (it holds
entries of its own, written in a term that lost its lease) is set aside
(``data.mdb.diverged-TIME``) and the board seeds itself, but only once
another board has written an in-sync set (``members.may_discard``):
until then it may have to lead again.

The server is never rebuilt: a call that arrives during a change of mode
is answered by one pipeline or the other, refused before it ran or
served; none is cancelled unseen (stopping a server would cancel what it
had received and not yet begun). Calls in progress when the board stops
leading get the grace period, then end UNAVAILABLE, before the board
closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

from msgboard.cluster import (
    TRANSIENT,
    Handover,
    Keys,
    Leadership,
    Position,
    Primary,
    PrimaryWatch,
    Replica,
    Replication,
    ReplicationService,
    Role,
    SyncSet,
)
from msgboard.cluster.channel import Dialing, use
from msgboard.cluster.insync import InSync
from msgboard.cluster.members import Membership, may_discard, promotable, unmoved
from msgboard.config import ServeConfig
from msgboard.console import Console
from msgboard.engine import Board, Limits
from msgboard.errors import NoLease, StoreError
from msgboard.lmdbstore import DurableStore, Log
from msgboard.lmdbstore.boardid import stable_id
from msgboard.security import Security
from msgboard.server.http import Listener
from msgboard.server.metrics import ClusterCollector, Metrics
from msgboard.server.readiness import Readiness
from msgboard.server.reflection import Reflection
from msgboard.server.roles import REPLICATION
from msgboard.server.serving import bind, board_pipeline, server_options
from msgboard.server.standby import BOARD, refusing
from msgboard.server.switchboard import Pipeline, Switchboard
from msgboard.v1 import board_pb2_grpc as pb_grpc
from msgboard.v1 import replication_pb2_grpc as rpb_grpc

log = logging.getLogger("msgboard.cluster")

#: How often the node looks at its term and the primary (seconds).
STEER = 0.05
#: How often a switchover looks whether its successor has caught up (seconds).
SWITCH_LOOK = 0.01
#: The file that says this board led (its log may have a tail of its own).
LED = "led"


def board_name(config: ServeConfig, address: str) -> str:
    return config.board_name or address.replace(":", "-").strip("[]")


def console_url(config: ServeConfig, metrics_at: str, address: str) -> str:
    """Where this board's console is, as it publishes it in its leader key
    (a standby's console links there): its listener's HOST:PORT, the host
    of the address it advertises when it listens on every interface; ""
    without a console."""
    if not metrics_at:
        return ""
    host, _, port = metrics_at.rpartition(":")
    if host.strip("[]") in ("", "0.0.0.0", "::"):
        host = address.rpartition(":")[0]
    return f"{'https' if config.tls else 'http'}://{host}:{port}/"


class Node:
    """One board of a cluster, as ``config`` says, from ``run()`` to its end."""

    def __init__(
        self,
        config: ServeConfig,
        *,
        limits: Limits | None = None,
        grace: float = 2.0,
        ready: Callable[[int], None] | None = None,
    ) -> None:
        self.config = config
        self.limits = limits
        self.grace = grace
        self.ready = ready
        self.security = Security.build(config)
        if config.cluster_ca:  # TLS to the other boards (cluster/channel.py)
            use(Dialing(config.cluster_ca, config.tls_cert, config.tls_key))
        self.keys = Keys(config.cluster)
        self.role = Role(leading=False, term=self._term)
        self.role.counting = True
        #: Role, epoch, the board's figures while it leads (cluster-operations.md).
        self.metrics: Listener | None = None
        if config.metrics_listen:
            Metrics.check(config)
            self.metrics = Listener(
                Metrics(None, cluster=ClusterCollector(self.role)),
                Console(
                    None,
                    users=lambda: self.security.users,
                    tls=config.tls,
                    role=self.role,
                    primary_console=self._primary_console,
                ),
            )
        self.name = ""
        self.address = ""
        self.port = 0
        self.host = config.listen.rsplit(":", 1)[0]
        #: Guards the standby's parts (store, replica) across threads.
        self._lock = threading.RLock()
        self.store: DurableStore | None = None
        self.replica: Replica | None = None
        #: The primary the replica follows (or followed, until a new one).
        self.following: Primary | None = None
        self.board: Board | None = None
        self.replication: Replication | None = None
        self.epoch = 0
        self.server: grpc.aio.Server | None = None
        #: Hands each call to the pipeline of the board's role.
        self.switchboard: Switchboard | None = None
        self._standby = Pipeline()
        self.readiness = Readiness(config.ready_file)
        self.leadership: Leadership | None = None
        self.watch: PrimaryWatch | None = None
        self.membership: Membership | None = None
        self._last = Position("", "", 0, 0)
        #: Its data directory's ``board-id`` (read when it starts): what
        #: the in-sync set records beside its name.
        self.directory_id = ""
        #: Set when the term ends: stops the switchover watch.
        self._handing = threading.Event()
        #: The term ended by a switchover its successor had all of.
        self._handed = False
        #: When this board last stopped following to judge an election.
        self._judged = 0.0
        #: This board resigned for a switchover (set before it resigns, so
        #: that the demotion lets what is in progress finish), and the
        #: thread that did it (it decides ``_handed``).
        self._resigned = False
        self._handover: threading.Thread | None = None

    def _primary_console(self) -> str:
        """The console of the primary this board follows, as its leader key
        says ("" if it does not, or none is followed)."""
        f = self.following
        return f.console if f is not None and f.address == self.role.primary else ""

    # -- the term and the fence --------------------------------------------

    def _term(self) -> Any:
        t = self.leadership.term() if self.leadership else None
        return t if t is not None and t.epoch == self.epoch else None

    def _fence(self) -> int:
        """The commit fence: this term's epoch, or NoLease."""
        t = self._term()
        if t is None:
            raise NoLease(self.epoch)
        return int(t.epoch)

    # -- the standby's store -------------------------------------------------

    def _open_standby(self) -> DurableStore:
        """The standby's store."""
        c = self.config
        log_ = Log(keep=c.log_keep, limit=c.log_limit)
        return DurableStore(c.data, sync=c.sync == "fsync", log=log_, standby=True)

    def _led(self) -> int:
        """The first epoch this board led in with the data it holds (its
        ``led`` file); 0 if it did not lead with it, or that data is gone."""
        try:
            with open(os.path.join(self.config.data, LED)) as f:
                return int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _discard(self) -> bool | None:
        """The Replica's question before its data goes (its log refused by
        the primary): None to keep it for now, True to set it aside (it
        led), False for a plain standby. Asked on the Replica's thread."""
        led = self._led()
        if not led:
            return False
        assert self.leadership is not None
        try:
            sync = self.leadership.read_sync()
        except TRANSIENT as e:
            log.info("%s: cannot read the in-sync set (%s): keeping its data", self.name, e)
            return None
        if not may_discard(self.name, led, sync):
            return None
        log.warning(
            "%s led with its data since epoch %d, and %s has written the in-sync set of "
            "epoch %d: its data is set aside",
            *(self.name, led, sync.primary if sync else "", sync.epoch if sync else 0),
        )  # fmt: skip
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.config.data, LED))
        return True

    def position(self) -> Position:
        """This board's position, for its member key."""
        board, store = self.board, self.store
        try:
            if board is not None and board.log is not None:
                p = Position(self.name, self.address, board.log.last, self.epoch)
            elif store is not None:
                index, epoch = store.log_position()
                p = Position(self.name, self.address, index, epoch, self.replica is None)
            else:
                p = Position(self.name, self.address, self._last.index, self._last.epoch, True)
            p = dataclasses.replace(p, board_id=self.directory_id)
        except StoreError:
            return self._last  # closed while we looked: the last one said
        self._last = p
        return p

    def _halt(self) -> None:
        """Stops following (a candidate's position must be final)."""
        with self._lock:
            replica, self.replica = self.replica, None
            if replica is not None:
                replica.stop()
                self.store = replica.store  # seeding may have opened it again
                log.info("stopped following %s to judge an election", replica.primary)

    def _follow(self, primary: Primary | None) -> None:
        """Follows ``primary`` if it is new, or again after a candidate's
        stop (a standby's steering)."""
        if primary is None or primary.name == self.name or primary == self.following:
            return
        with self._lock:
            if self.board is not None or primary == self.following:
                return
            if self.watch is not None and self.watch.seen_at <= self._judged:
                return  # read before the candidate stopped: maybe the one gone
            self._halt()
            if self.store is None:
                self.store = self._open_standby()
            self.following = primary
            # A board that led follows with its data: a log that is a
            # prefix of the new primary's goes on from where it is; one
            # refused is thrown away only once ``may_discard`` says so.
            self.replica = Replica(
                self.store,
                primary.address,
                self.config.replication_token,
                self.name,
                reopen=self._open_standby,
                board_id=self.name,  # the name the in-sync set and the election use
                discard=self._discard,
            )
            self.role.become(leading=False, primary=primary.address, epoch=primary.epoch)
        if self.membership is not None:
            self.membership.nudge()

    def _eligible(self, sync: SyncSet | None) -> bool | list[dict[str, Any]]:
        """Leadership's question, on its thread, while no board leads."""
        if self.board is not None or self.membership is None:
            return False
        # Stopped to judge: following again waits for a read of who leads
        # made after now (``_follow``), even of the primary it followed (a
        # board elected while this one looked, whose answer came first).
        with self._lock:
            self._judged = time.monotonic()
            self._halt()
            self.following = None
            if self.board is not None or self.store is None:
                return False
            mine = self.membership.publish()
        handover = self.membership.handover()
        if handover is not None and handover.to != self.name:
            log.info("not campaigning: a switchover hands over to %s", handover.to)
            return False
        positions = self.membership.positions()
        chosen = promotable(
            self.name,
            sync,
            positions,
            self.config.sync_standbys,
            handover.to if handover else "",
            led=self._led(),
        )
        if chosen is None:
            log.debug("not eligible at %s: set %s, members %s", mine.rank, sync, positions)
            return False
        log.info("eligible at %s: set %s", mine.rank, sync.standbys if sync else "none yet")
        return unmoved(self.keys, chosen)

    # -- the servers -----------------------------------------------------------

    async def _standby_pipeline(self) -> Pipeline:
        """What the board's server answers while this board is a standby:
        refusals, the replication service, health and reflection."""
        pipeline = Pipeline()
        server: Any = pipeline  # the generated code adds services as to a server
        pb_grpc.add_BoardServicer_to_server(refusing(self.role, lambda: self.address), server)
        rpb_grpc.add_ReplicationServicer_to_server(
            ReplicationService(self.config.replication_token, self.role), server
        )
        await self.readiness.add_to(server, serving=True)
        names = (BOARD.full_name, REPLICATION, "grpc.health.v1.Health")
        pipeline.add_generic_rpc_handlers(Reflection(names).handlers())
        return pipeline

    async def _start_server(self) -> None:
        """The board's one server, for its whole run: its calls go to the
        pipeline of its role (``msgboard.server.switchboard``)."""
        self._standby = await self._standby_pipeline()
        self.switchboard = Switchboard(self._standby)
        server = grpc.aio.server(
            options=server_options(self.limits or Limits()), interceptors=[self.switchboard]
        )
        self.port = bind(server, self.config.listen, self.security)
        await server.start()
        self.server = server

    async def _primary_pipeline(self) -> Pipeline:
        assert self.board is not None and self.replication is not None
        return await board_pipeline(
            self.board, self.security, readiness=None, replication=self.replication.service
        )

    # -- promotion and demotion ----------------------------------------------

    async def _promote(self, epoch: int) -> None:
        assert self.leadership is not None
        log.info("%s elected, epoch %d: opening the board", self.name, epoch)
        await asyncio.to_thread(self._halt)
        with self._lock:
            if self.store is not None:
                self.store.close()
                self.store = None
        c = self.config
        self.epoch = epoch
        replication = Replication(
            c.replication_token,
            needed=c.sync_standbys,
            timeout=c.sync_timeout_ms / 1000,
            allow_async=c.allow_async,
            keep=c.log_keep,
            limit=c.log_limit,
            forget=c.log_pin_seconds,
            role=self.role,
            gate=functools.partial(InSync, self.leadership),
        )
        replication.log.fence = self._fence
        try:
            if not self._led():  # kept: the data it led with since then
                with open(os.path.join(c.data, LED), "w") as f:
                    f.write(f"{epoch}\n")
                    f.flush()
                    os.fsync(f.fileno())
            board = await asyncio.to_thread(
                functools.partial(
                    Board, c.data, sync=c.sync == "fsync", limits=self.limits, log=replication.log
                )
            )
        except Exception:
            log.exception("%s: the board did not open; resigning", self.name)
            self.leadership.resign(hold=2 * c.lease_ttl)
            self.epoch = 0
            return
        self.board, self.replication = board, replication
        # Standbys that saw this epoch follow at once, before its first commit.
        replication.log.epoch = max(replication.log.epoch, epoch)
        replication.attach(board)
        if self.metrics is not None:
            self.metrics.use(board, replication.standbys)
        self._handing = threading.Event()
        self._handover = threading.Thread(
            target=self._hand_over, args=(epoch, self._handing), name="handover", daemon=True
        )
        self._handover.start()
        pipeline = await self._primary_pipeline()
        self.role.become(leading=True, primary=None, epoch=epoch)
        # Calls from now on are served; those the standby's pipeline took in
        # are refused (NotPrimary naming this board: sent again, served).
        assert self.switchboard is not None
        self.switchboard.use(pipeline)
        if self.membership is not None:
            self.membership.nudge()
        log.info("%s is the primary, epoch %d, at %s", self.name, epoch, self.address)

    def _hand_over(self, epoch: int, done: threading.Event) -> None:
        """While this board leads in ``epoch``: carries out a switchover
        asked for it (its own thread; etcd is read every quarter second)."""
        assert self.membership is not None and self.leadership is not None
        while not done.wait(0.25):
            try:
                handover = self.membership.handover()
            except TRANSIENT:
                continue
            if handover is None or handover.epoch != epoch or handover.to == self.name:
                continue
            self._handed = self._switch(handover, done)
            if self._handed:
                return

    def _switch(self, handover: Handover, done: threading.Event) -> bool:
        """Lets no new group in (new calls and stream requests answer
        NotPrimary naming ``handover.to``; open streams end so, once what
        they took in is answered: ``msgboard.server.roles``), waits until
        nothing is held (no call or stream in progress, no group waiting
        for its standbys) and the successor has acknowledged the last
        entry, and resigns; whether this board's log ends where its
        successor's goes on (else it is set aside as after a fence)."""
        board, gate = self.board, self.replication.gate if self.replication else None
        assert board is not None and board.log is not None and isinstance(gate, InSync)
        assert self.leadership is not None
        log.info("switchover to %s: new calls go there", handover.to)
        self.role.handover = handover.address
        deadline = time.monotonic() + max(5.0, 2 * self.config.sync_timeout_ms / 1000)
        while True:
            held = self.role.calls + self.role.streams + gate.pending
            if held == 0 and gate.acked(handover.to) >= board.log.last:
                break
            if time.monotonic() > deadline or done.is_set():
                log.warning(
                    "switchover to %s: not caught up (%d calls, %d streams, %d groups held; "
                    "acked %d of %d); staying",
                    *(handover.to, self.role.calls, self.role.streams, gate.pending),
                    *(gate.acked(handover.to), board.log.last),
                )  # fmt: skip
                self.role.handover = None
                return False
            time.sleep(SWITCH_LOOK)
        self._resigned = True
        self.leadership.resign(hold=2 * self.config.lease_ttl)
        # A group that passed the commit fence before the term ended may
        # still be committing: judge the log once the writer is past it.
        written = threading.Event()
        board.call_soon(written.set)
        written.wait(10)
        clean = gate.acked(handover.to) >= board.log.last
        log.info("switchover to %s: resigned at log index %d", handover.to, board.log.last)
        return clean

    async def _demote(self) -> None:
        """The term ended (fenced or resigned): a standby again."""
        board, replication = self.board, self.replication
        self._handing.set()
        log.warning("%s no longer leads (epoch %d): a standby again", self.name, self.epoch)
        # Resigned for a switchover: calls go on to the successor meanwhile.
        successor = self.role.handover if self._resigned else None
        self.role.become(leading=False, primary=successor, epoch=self.epoch)
        if replication is not None:
            replication.close()
        if self.metrics is not None:
            self.metrics.use(None)
        # After a switchover what is still in progress finishes (refused),
        # and its thread has said whether the successor had every entry.
        resigned = self._resigned
        if resigned and self._handover is not None:
            await asyncio.to_thread(self._handover.join, 10)
        assert self.switchboard is not None
        old = self.switchboard.use(self._standby)
        await old.drain(self.grace if resigned else 0)
        with self._lock:
            self.board = self.replication = None
            self.epoch = 0
            if board is not None:
                await asyncio.to_thread(board.close)
            if self._handed:
                # Its log is a prefix of its successor's: it follows on.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.config.data, LED))
            # Otherwise it follows the next primary with its data
            # (``_follow``), which is set aside only if that primary refuses
            # its log and another board has written a set (``_discard``):
            # until then it may be elected again, holding all it answered.
            self._handed = self._resigned = False
            self.following = None
            self.store = self._open_standby()
        if self.membership is not None:
            self.membership.nudge()

    # -- running ---------------------------------------------------------------

    async def run(self) -> None:
        c = self.config
        self.store = self._open_standby()
        self.directory_id = stable_id(c.data)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await self._start_server()
            metrics_at = await self.metrics.start(c) if self.metrics is not None else ""
            self.address = c.advertise or f"{self.host}:{self.port}"
            self.name = board_name(c, self.address)
            self._last = Position(self.name, self.address, 0, 0, True)
            self.watch = PrimaryWatch(c.etcd, c.cluster, every=max(0.5, c.lease_ttl / 3)).start()
            self.membership = Membership(
                c.etcd, c.cluster, self.name, self.position, ttl=c.lease_ttl
            ).start()
            self.leadership = Leadership(
                c.etcd, c.cluster, self.name, self.address, ttl=c.lease_ttl,
                eligible=self._eligible, console=console_url(c, metrics_at, self.address),
            ).start()  # fmt: skip
            await self.readiness.serving(f"{self.host}:{self.port}", metrics_at)
            log.info(
                "msgboard %s of cluster %s on %s:%d (data %s): a standby until elected",
                self.name,
                c.cluster,
                self.host,
                self.port,
                c.data,
            )
            if self.ready is not None:
                self.ready(self.port)
            while not stop.is_set():
                await self._steer()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), STEER)
            log.info("msgboard %s stopping", self.name)
            await self.readiness.stopping()
        finally:
            await self._close()

    async def _steer(self) -> None:
        assert self.leadership is not None and self.watch is not None
        term = self.leadership.term()
        if self.board is None:
            if term is not None:
                await self._promote(term.epoch)
            else:
                await asyncio.to_thread(self._follow, self.watch.current())
        elif term is None or term.epoch != self.epoch:
            await self._demote()

    async def _close(self) -> None:
        leading = self.board is not None
        if self.leadership is not None and not leading:
            await asyncio.to_thread(self.leadership.stop)
        if self.replication is not None:
            self.replication.close()
        if self.metrics is not None:
            await self.metrics.close()
        if self.server is not None:
            await self.server.stop(self.grace if leading else 0)
        if self.board is not None:
            await asyncio.to_thread(self.board.close)
            self.board = None
        if self.leadership is not None and leading:
            # Resigned only once nothing more is answered here.
            await asyncio.to_thread(self.leadership.stop)
        await asyncio.to_thread(self._halt)
        if self.store is not None:
            self.store.close()
        for part in (self.membership, self.watch):
            if part is not None:
                with contextlib.suppress(*TRANSIENT):
                    await asyncio.to_thread(part.stop)


async def serve_cluster(
    config: ServeConfig,
    *,
    limits: Limits | None = None,
    grace: float = 2.0,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Runs a board of a cluster as ``config`` says until SIGTERM or SIGINT."""
    await Node(config, limits=limits, grace=grace, ready=ready).run()
