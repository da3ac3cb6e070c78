"""A standby's side of the log: ``Replica`` follows its primary.

One thread of its own (a blocking gRPC stream, so that applying, which
fsyncs, never holds the server's event loop): it opens ``Follow`` from the
index after the last one its store applied, applies each batch of entries
in one LMDB transaction with fsync (``DurableStore.apply``), then
acknowledges the batch's last index. When the stream breaks (the primary
restarted, the network) it connects again with capped backoff and goes on
from where its store is. A ``LogTruncated`` answer (the primary no longer
keeps the entries this standby needs, or never had them) makes it seed
itself: the primary's ``Seed`` copy replaces its data, then it follows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from msgboard.cluster.channel import channel
from msgboard.cluster.service import TOKEN_KEY
from msgboard.details import DETAILS_KEY
from msgboard.lmdbstore import DurableStore
from msgboard.lmdbstore.sidecar import SIDECAR
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc

log = logging.getLogger(__name__)

#: Reconnecting waits this long at first, doubling up to ``MAX_BACKOFF``.
BACKOFF = 0.1
MAX_BACKOFF = 2.0


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
    ) -> None:
        self.store = store
        self._reopen = reopen
        self.primary = primary
        self._token = token
        self._name = name
        self._credentials = credentials
        self._stop = threading.Event()
        self._call: Any = None
        #: The primary's last index, as its last answer said.
        self.primary_last = 0
        self._thread = threading.Thread(target=self._run, name="msgboard-replica", daemon=True)
        self._thread.start()

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
                if truncated(e) and self._reopen is not None:
                    log.warning("following %s: %s; seeding this standby", self.primary, details)
                    try:
                        self._seed()
                        continue
                    except grpc.RpcError as again:
                        code, details = again.code(), again.details()
                bad = code == grpc.StatusCode.FAILED_PRECONDITION
                # Said once while the primary stays away, not every retry.
                level = logging.ERROR if bad else logging.INFO if wait == BACKOFF else logging.DEBUG
                log.log(level, "following %s: %s: %s", self.primary, code.name, details)
            except Exception:
                log.exception("following %s failed; trying again", self.primary)
            self._stop.wait(wait)
            wait = min(wait * 2, MAX_BACKOFF)

    def _follow(self) -> bool:
        """One Follow stream, until it ends; True if it applied anything."""
        target = self.primary
        channel = self._channel()
        sends: queue.SimpleQueue[rpb.FollowRequest | None] = queue.SimpleQueue()
        hello = rpb.Hello(board=self._name, from_index=self.applied + 1)
        sends.put(rpb.FollowRequest(hello=hello))
        applied = False
        try:
            stub = rpb_grpc.ReplicationStub(channel)
            self._call = call = stub.Follow(_drain(sends), metadata=((TOKEN_KEY, self._token),))
            if self._stop.is_set():
                call.cancel()  # type: ignore[no-untyped-call]
            log.info("following %s from log index %d", target, hello.from_index)
            for r in call:
                self.primary_last = r.last
                if r.entries:
                    last = self.store.apply(list(r.entries))
                    sends.put(rpb.FollowRequest(ack=rpb.Ack(index=last)))
                    applied = True
        finally:
            sends.put(None)
            channel.close()
        return applied

    def _seed(self) -> None:
        """Replaces this standby's data by a copy of the primary's: the
        copy is written beside data.mdb and fsynced, the store closed, the
        copy renamed into place and the store opened again."""
        assert self._reopen is not None
        path = self.store.path
        part = os.path.join(path, "data.mdb.seed")
        with self._channel() as channel, open(part, "wb") as out:
            stub = rpb_grpc.ReplicationStub(channel)
            self._call = call = stub.Seed(
                rpb.SeedRequest(board=self._name), metadata=((TOKEN_KEY, self._token),)
            )
            for chunk in call:
                out.write(chunk.data)
            out.flush()
            os.fsync(out.fileno())
        self.store.close()
        os.replace(part, os.path.join(path, "data.mdb"))
        # The commit sidecar spoke of the old file: the new one may be an
        # older commit of LMDB's count, and must not pass for a rollback.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, SIDECAR))
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


def truncated(e: grpc.RpcError) -> bool:
    """Whether the primary answered LogTruncated (its ErrorInfo reason)."""
    call: Any = e
    if call.code() != grpc.StatusCode.FAILED_PRECONDITION:
        return False
    for key, value in call.trailing_metadata() or ():
        if key == DETAILS_KEY:
            status = status_pb2.Status.FromString(value)
            for d in status.details:
                info = error_details_pb2.ErrorInfo()
                if d.Unpack(info) and info.reason == "LogTruncated":
                    return True
    return False


def _drain(sends: queue.SimpleQueue[rpb.FollowRequest | None]) -> Iterator[rpb.FollowRequest]:
    while True:
        item = sends.get()
        if item is None:
            return
        yield item
