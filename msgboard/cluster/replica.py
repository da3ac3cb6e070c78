"""A standby's side of the log: ``Replica`` follows its primary.

One thread of its own (a blocking gRPC stream, so that applying, which
fsyncs, never holds the server's event loop): it opens ``Follow`` from the
index after the last one its store applied, applies each batch of entries
in one LMDB transaction with fsync (``DurableStore.apply``), then
acknowledges the batch's last index. When the stream ends or breaks in
any way but a refusal that sends it to seed itself (the primary restarted
or swapped its server: GOAWAY, CANCELLED; the network), or stays silent
past ``silence`` seconds (a connection lost in a partition), it connects
again with capped backoff and goes on from where its store is.

Its Hello names its last entry by (index, epoch, CRC32C): the primary lets
it follow only if its own entry at that index is the same. A
``LogTruncated`` answer (the primary no longer keeps the entries this
standby needs, or never had them) makes it seed itself: the primary's
``Seed`` copy replaces its data, then it follows. A ``LogDiverged`` answer
(its log is not the primary's: it was a primary itself, or the primary's
log restarted) makes it move its data aside (``data.mdb.diverged-TIME``,
kept for whoever wants to look, never served) and seed itself. Before
either, it asks ``discard`` (a board that led: ``Node``), which may keep
the data for now (it asks again later) or have it set aside. It refuses
an answer whose epoch is below the highest it has seen (a deposed
primary), and an entry whose epoch is below the one before it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from msgboard.cluster.channel import channel
from msgboard.cluster.service import TOKEN_KEY
from msgboard.details import DETAILS_KEY
from msgboard.lmdbstore import DurableStore
from msgboard.lmdbstore.boardid import fsync_dir, stable_id
from msgboard.lmdbstore.oplog import identity, index_of
from msgboard.lmdbstore.sidecar import SIDECAR
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc

log = logging.getLogger(__name__)

#: Reconnecting waits this long at first, doubling up to ``MAX_BACKOFF``.
BACKOFF = 0.1
MAX_BACKOFF = 2.0
#: Seconds a Follow stream may stay silent (the primary sends a heartbeat
#: every second when it has nothing to ship) before it is taken as broken
#: (a connection through a partition that never ends), cancelled and
#: followed again.
SILENCE = 15.0


class Replica:
    """Follows the primary at ``primary`` (HOST:PORT) into ``store`` (a
    standby's: ``DurableStore(path, log=Log(), standby=True)``).
    ``credentials``: TLS to the primary (None: plaintext)."""

    def __init__(
        self,
        store: DurableStore,
        primary: str,
        token: str,
        name: str,
        credentials: grpc.ChannelCredentials | None = None,
        reopen: Callable[[], DurableStore] | None = None,
        *,
        board_id: str = "",
        silence: float = SILENCE,
        discard: Callable[[], bool | None] | None = None,
    ) -> None:
        self.store = store
        self._reopen = reopen
        self.primary = primary
        self._token = token
        self._name = name
        #: This board's stable id (``board_id``), under which the primary
        #: keeps its place.
        self.board_id = board_id or stable_id(store.path)
        #: Its data directory's id, which the in-sync set records.
        self.directory_id = stable_id(store.path)
        self._credentials = credentials
        self._stop = threading.Event()
        self._call: Any = None
        #: The primary's last index, as its last answer said.
        self.primary_last = 0
        #: The highest epoch seen: in this store's last entry, or in a
        #: primary's answer. A primary below it is refused.
        self.epoch = 0
        #: The id of the Seed copy this store came from (named in Hello).
        self._copy_id = ""
        self._silence = silence
        #: Asked before a refusal makes this standby throw its data away
        #: (seed): None keeps it and asks again later; True sets it aside
        #: first whatever the reason (a board that led: ``Node``).
        self._discard = discard
        #: The open Follow call and when it last said anything (monotonic).
        self._stream: Any = None
        self._heard = 0.0
        self._thread = threading.Thread(target=self._run, name="msgboard-replica", daemon=True)
        self._thread.start()
        threading.Thread(target=self._watch, name="msgboard-replica-watch", daemon=True).start()

    @property
    def applied(self) -> int:
        """The last index this standby applied."""
        return self.store.log.last if self.store.log else 0

    def _run(self) -> None:
        wait = BACKOFF
        while not self._stop.is_set():
            try:
                if self._follow():
                    wait = BACKOFF
            except grpc.RpcError as e:
                if self._stop.is_set():
                    return
                code, details = e.code(), e.details()
                why = reason(e)
                if why in SEEDS and self._reopen is not None:
                    verdict = self._discard() if self._discard is not None else False
                    if verdict is None:
                        log.log(
                            logging.WARNING if wait == BACKOFF else logging.DEBUG,
                            "following %s: %s; keeping this board's data until another "
                            "board has written an in-sync set",
                            *(self.primary, details),
                        )  # fmt: skip
                        self._stop.wait(wait)
                        wait = min(wait * 2, MAX_BACKOFF)
                        continue
                    log.warning("following %s: %s; seeding this standby", self.primary, details)
                    try:
                        self._seed(aside=verdict or why == "LogDiverged")
                        continue
                    except grpc.RpcError as again:
                        code, details = again.code(), again.details()
                bad = code == grpc.StatusCode.FAILED_PRECONDITION
                # Said once while the primary stays away, not every retry.
                level = logging.ERROR if bad else logging.INFO if wait == BACKOFF else logging.DEBUG
                log.log(level, "following %s: %s: %s", self.primary, code.name, details)
            except Stale as e:
                log.error("following %s: %s", self.primary, e)
            except Exception:
                log.exception("following %s failed; trying again", self.primary)
            self._stop.wait(wait)
            wait = min(wait * 2, MAX_BACKOFF)

    def _watch(self) -> None:
        """Cancels a Follow stream silent for longer than ``silence``: the
        stream then ends with an error and ``_run`` follows again."""
        while not self._stop.wait(min(1.0, self._silence / 4)):
            call = self._stream
            quiet = time.monotonic() - self._heard
            if call is not None and quiet > self._silence:
                log.warning(
                    "following %s: nothing heard in %.0f s; following again", self.primary, quiet
                )
                self._stream = None
                call.cancel()

    def hello(self) -> rpb.Hello:
        """The Hello this standby sends: its last entry's identity."""
        last, epoch, crc = self.applied, 0, 0
        if last:
            mine = self.store.entries(last, 1)
            if mine and index_of(mine[0]) == last:
                _, epoch, crc = identity(mine[0])
        self.epoch = max(self.epoch, epoch)
        return rpb.Hello(
            board=self._name,
            from_index=last + 1,
            last_epoch=epoch,
            last_crc=crc,
            epoch=self.epoch,
            board_id=self.board_id,
            copy_id=self._copy_id if not crc else "",
            directory_id=self.directory_id,
        )

    def _follow(self) -> bool:
        """One Follow stream, until it ends; True if it applied anything."""
        target = self.primary
        channel = self._channel()
        sends: queue.SimpleQueue[rpb.FollowRequest | None] = queue.SimpleQueue()
        hello = self.hello()
        sends.put(rpb.FollowRequest(hello=hello))
        applied = False
        try:
            stub = rpb_grpc.ReplicationStub(channel)
            self._call = call = stub.Follow(_drain(sends), metadata=((TOKEN_KEY, self._token),))
            if self._stop.is_set():
                call.cancel()  # type: ignore[no-untyped-call]
            self._heard, self._stream = time.monotonic(), call
            log.info("following %s from log index %d", target, hello.from_index)
            for r in call:
                self._heard = time.monotonic()
                if r.epoch < self.epoch:
                    call.cancel()  # type: ignore[no-untyped-call]
                    raise Stale(
                        f"its epoch is {r.epoch}, below {self.epoch} seen before: "
                        "it is no longer the primary"
                    )
                self.epoch = r.epoch
                self.primary_last = r.last
                if r.entries:
                    last = self.store.apply(list(r.entries))
                    sends.put(rpb.FollowRequest(ack=rpb.Ack(index=last)))
                    applied = True
        finally:
            self._stream = None
            sends.put(None)
            channel.close()
        return applied

    def _seed(self, *, aside: bool = False) -> None:
        """Replaces this standby's data by a copy of the primary's: the
        copy is written beside data.mdb and fsynced, the store closed, the
        copy renamed into place (the old data.mdb renamed to
        ``data.mdb.diverged-TIME`` first when ``aside``: kept, never
        served), the directory fsynced and the store opened again."""
        assert self._reopen is not None
        path = self.store.path
        part = os.path.join(path, "data.mdb.seed")
        with self._channel() as channel, open(part, "wb") as out:
            stub = rpb_grpc.ReplicationStub(channel)
            request = rpb.SeedRequest(board=self._name, board_id=self.board_id)
            self._call = call = stub.Seed(request, metadata=((TOKEN_KEY, self._token),))
            made = ""
            for chunk in call:
                made = made or chunk.copy_id
                out.write(chunk.data)
            out.flush()
            os.fsync(out.fileno())
        self.store.close()
        data = os.path.join(path, "data.mdb")
        if aside:
            kept = f"{data}.diverged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            os.replace(data, kept)
            log.warning(
                "this standby's log diverged from %s: its data kept as %s", self.primary, kept
            )
        os.replace(part, data)
        # The commit sidecar spoke of the old file: the new one may be an
        # older commit of LMDB's count, and must not pass for a rollback.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, SIDECAR))
        fsync_dir(path)
        self._copy_id = made
        self.store = self._reopen()
        log.info("seeded from %s: log index %d", self.primary, self.applied)

    def _channel(self) -> grpc.Channel:
        # TLS as the cluster's settings say (channel.py).
        return channel(self.primary, self._credentials)

    def stop(self) -> None:
        """Ends the stream and the thread (the store stays open)."""
        self._stop.set()
        call = self._call
        if call is not None:
            call.cancel()
        self._thread.join(timeout=10)


#: The reasons a primary's refusal sends a standby to seed itself.
SEEDS = ("LogTruncated", "LogDiverged")


class Stale(Exception):
    """A primary answered with an epoch below one this standby has seen."""


def reason(e: grpc.RpcError) -> str:
    """The ErrorInfo reason of the primary's refusal ("" if none)."""
    call: Any = e
    for key, value in call.trailing_metadata() or ():
        if key == DETAILS_KEY:
            status = status_pb2.Status.FromString(value)
            for d in status.details:
                info = error_details_pb2.ErrorInfo()
                if d.Unpack(info):
                    return str(info.reason)
    return ""


def _drain(sends: queue.SimpleQueue[rpb.FollowRequest | None]) -> Iterator[rpb.FollowRequest]:
    while True:
        item = sends.get()
        if item is None:
            return
        yield item
