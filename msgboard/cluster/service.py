"""The replication service (``proto/msgboard/v1/replication.proto``):
``ReplicationService``, thin, on the board's own port beside the Board
service.

Every call must carry the cluster's token (metadata ``TOKEN_KEY``),
compared in constant time; the client-facing users and permissions do not
apply to it (``security/guard.py`` leaves the service to this check).

``Follow``: a standby's ``hello`` names the first index it needs and the
identity of its last entry (index, epoch, CRC32C); ``judge`` lets it follow
only if this log holds that same entry (FAILED_PRECONDITION ``LogDiverged``
if the entry differs or is past this log's last, ``LogTruncated`` if the
log no longer holds it: the standby seeds itself again). The stream sends
every committed entry from there, in batches, as they come (``Shipper``),
with this primary's epoch, and each ``ack`` tells ``SyncGate`` how far the
standby has applied and fsynced (under its stable id, ``board_id``). A
standby that falls behind the log's front while it follows gets
``LogTruncated`` too. ``Seed``: a hot copy of the board
(``Board.snapshot_async``, written beside its directory and removed after),
streamed as its data.mdb's bytes; the log is pinned from the index the copy
holds until the standby follows (``SyncGate.seeding``). ``Probe``: the same
check as Follow's, for a board that rejoins.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from msgboard.cluster.role import Role
from msgboard.cluster.shipper import Shipper
from msgboard.cluster.sync import SyncGate
from msgboard.details import abort
from msgboard.engine import Board
from msgboard.errors import (
    FailedPrecondition,
    InvalidArgument,
    LogDiverged,
    LogTruncated,
    MsgboardError,
    Unauthenticated,
)
from msgboard.lmdbstore.oplog import identity
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc

log = logging.getLogger(__name__)

#: The metadata key of the cluster's token.
TOKEN_KEY = "x-msgboard-replication-token"
#: The bytes of one Seed chunk.
CHUNK = 1 << 20
#: How often an idle stream sends an empty batch (the primary's last index).
HEARTBEAT = 1.0
#: Seed copies whose ids a primary remembers.
COPIES = 64


def check_token(context: Any, token: str) -> bool:
    """Whether the call carries ``token``."""
    for key, value in context.invocation_metadata() or ():
        if key == TOKEN_KEY:
            return hmac.compare_digest(str(value).encode(), token.encode())
    return False


class ReplicationService(rpb_grpc.ReplicationServicer):
    """The primary's Replication service (a standby's refuses every call
    with NotPrimary)."""

    def __init__(
        self,
        token: str,
        role: Role,
        board: Board | None = None,
        shipper: Shipper | None = None,
        gate: SyncGate | None = None,
    ) -> None:
        self._token = token
        self._role = self.role = role
        self._board = board
        self._shipper = shipper
        self._gate = gate
        #: The ids of the last ``COPIES`` Seed copies made (in memory).
        self._copies: dict[str, None] = {}
        #: Each standby's newest Follow stream (a token of its own), by id:
        #: an older one of the same standby (given up on as silent, its
        #: connection lost in a partition) ends, and its end does not
        #: count as the standby's (``gone``).
        self._newest: dict[str, object] = {}

    async def Follow(
        self, requests: AsyncIterator[rpb.FollowRequest], context: Any
    ) -> AsyncIterator[rpb.FollowResponse]:
        await self._check(context)
        board, shipper, gate = self._board, self._shipper, self._gate
        assert board is not None and shipper is not None and board.log is not None  # _check
        first = await anext(aiter(requests), None)
        if first is None or not first.HasField("hello"):
            await abort(
                context, InvalidArgument("a Follow stream starts with a hello", field="hello")
            )
        hello = first.hello
        name = hello.board or context.peer()
        key = hello.board_id or name
        if hello.from_index < 1:
            why = "from_index is the first index the standby needs: 1 or more"
            await abort(context, InvalidArgument(why, field="hello.from_index"))
        oplog = board.log
        if hello.epoch > oplog.epoch:
            why = (
                f"{name} has seen epoch {hello.epoch}, and this primary's is {oplog.epoch}: "
                "it is no longer the primary"
            )
            await abort(context, FailedPrecondition(why))
        refusal = await asyncio.to_thread(self._judge, hello, name)
        if refusal is not None:
            await abort(context, refusal)
        start = hello.from_index
        log.info("standby %s follows from log index %d", name, start)
        woken = shipper.attach()
        stream = self._newest[key] = object()
        acks = asyncio.create_task(self._acks(requests, key, gate, stream))
        if gate is not None:
            gate.connected(key, start - 1, name, hello.directory_id)
        try:
            while not acks.done() and self._newest.get(key) is stream:
                woken.clear()
                entries = await shipper.read(start)
                if entries is None:  # more than the log's limit behind
                    lo, hi = await asyncio.to_thread(board.log_bounds)
                    await abort(context, LogTruncated(_behind(name, start - 1, lo, hi)))
                if entries:
                    start += len(entries)
                    yield rpb.FollowResponse(entries=entries, last=start - 1, epoch=oplog.epoch)
                    continue
                if start <= oplog.last:  # the log moved on without it
                    lo, hi = await asyncio.to_thread(board.log_bounds)
                    if start < lo:
                        await abort(context, LogTruncated(_behind(name, start - 1, lo, hi)))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), HEARTBEAT)
                if not woken.is_set():
                    yield rpb.FollowResponse(last=start - 1, epoch=oplog.epoch)
        finally:
            shipper.detach(woken)
            acks.cancel()
            newest = self._newest.get(key) is stream
            if newest:
                del self._newest[key]
                if gate is not None:
                    gate.gone(key)
            log.info(
                "standby %s stopped following at log index %d%s",
                *(name, start - 1, "" if newest else " (a newer stream of it follows)"),
            )  # fmt: skip

    def _judge(self, hello: rpb.Hello, name: str) -> MsgboardError | None:
        """``judge`` with this board's log; a worker thread."""
        board = self._board
        assert board is not None
        lo, hi = board.log_bounds()
        last = hello.from_index - 1
        mine = board.entries(last, 1) if last and lo <= last <= hi else []
        seeded = bool(hello.copy_id) and hello.copy_id in self._copies
        return judge(hello, name, lo, hi, mine[0] if mine else None, seeded=seeded)

    async def Probe(self, request: rpb.ProbeRequest, context: Any) -> rpb.ProbeResponse:
        await self._check(context)
        board = self._board
        assert board is not None and board.log is not None  # _check
        hello = rpb.Hello(from_index=request.index + 1, last_epoch=request.epoch)
        hello.last_crc = request.crc
        lo, hi = await asyncio.to_thread(board.log_bounds)
        found = await asyncio.to_thread(self._judge, hello, "the board probing") is None
        return rpb.ProbeResponse(found=found, first=lo, last=hi, epoch=board.log.epoch)

    async def Seed(self, request: rpb.SeedRequest, context: Any) -> AsyncIterator[rpb.SeedChunk]:
        await self._check(context)
        board = self._board
        assert board is not None and board.log is not None  # _check
        beside = os.path.dirname(os.path.abspath(board.path))
        where = tempfile.mkdtemp(prefix=".msgboard-seed-", dir=beside)
        if self._gate is not None:
            # The copy holds at least this index: the log keeps it, and
            # what follows, until the standby follows (or is forgotten).
            self._gate.seeding(request.board_id or request.board, board.log.last)
        made = secrets.token_hex(8)
        self._copies[made] = None
        while len(self._copies) > COPIES:
            del self._copies[next(iter(self._copies))]
        try:
            copy = os.path.join(where, "copy")
            await asyncio.wrap_future(board.snapshot_async(copy))
            log.info("seeding standby %s from a copy of this board", request.board)
            with open(os.path.join(copy, "data.mdb"), "rb") as f:
                first = True
                while chunk := await asyncio.to_thread(f.read, CHUNK):
                    yield rpb.SeedChunk(data=chunk, copy_id=made if first else "")
                    first = False
        finally:
            await asyncio.to_thread(shutil.rmtree, where, True)

    async def Status(self, request: rpb.StatusRequest, context: Any) -> rpb.StatusResponse:
        """Answered by a replicating primary's ``StatusService`` (status.py);
        here, refused as ``_check`` refuses (a standby: NotPrimary)."""
        await self._check(context)
        await abort(context, FailedPrecondition("this board does not report its standbys"))

    async def _check(self, context: Any) -> None:
        """Refuses a call without the token, or to a board that is not a
        replicating primary."""
        if not check_token(context, self._token):
            why = "the replication service needs the cluster's token"
            await abort(context, Unauthenticated(why))
        refusal = self._role.refusal()
        if refusal is not None or self._board is None or self._shipper is None:
            await abort(context, refusal or FailedPrecondition("this board does not replicate"))

    async def _acks(
        self,
        requests: AsyncIterator[rpb.FollowRequest],
        key: str,
        gate: SyncGate | None,
        stream: object,
    ) -> None:
        async for r in requests:
            if r.HasField("ack") and gate is not None and self._newest.get(key) is stream:
                gate.ack(key, r.ack.index)


def judge(
    hello: rpb.Hello,
    name: str,
    first: int,
    last: int,
    mine: bytes | None,
    *,
    seeded: bool = False,
) -> MsgboardError | None:
    """Whether the standby ``name`` that says ``hello`` may follow a log
    that holds entries ``first`` to ``last`` (``mine``: its entry at the
    standby's last index, if it holds it; ``seeded``: it names a Seed copy
    this primary made): None if so, else the error that sends the standby
    to seed itself (LogTruncated: this log no longer holds what it needs;
    LogDiverged: its log is not this one). ``judge_entry`` decides."""
    ours = identity(mine)[1:] if mine is not None else None
    theirs = (hello.last_epoch, hello.last_crc)
    return judge_entry(name, hello.from_index - 1, theirs, first, last, ours, seeded=seeded)


def judge_entry(
    name: str,
    at: int,
    theirs: tuple[int, int],
    first: int,
    last: int,
    mine: tuple[int, int] | None,
    *,
    seeded: bool = False,
) -> MsgboardError | None:
    """``judge`` on plain values (the model of the protocol asks it too):
    the standby's last index ``at`` and that entry's (epoch, CRC32C)
    ``theirs``; this log's ``first`` and ``last``, and its own (epoch,
    CRC32C) at ``at`` if it holds it (``mine``). None: the standby's log
    is a prefix of this one, and it follows on from ``at + 1``."""
    if at == 0:  # an empty standby: from the log's first entry, if kept
        if last == 0 or first <= 1:
            return None
        return LogTruncated(
            f"the log holds entries {first} to {last}; {name} has none of them: "
            "it must be seeded (Seed)"
        )
    if at > last:
        return LogDiverged(
            f"{name}'s last log entry is {at}, past this primary's last, {last}: "
            "it holds writes this primary does not; it must be seeded again"
        )
    if mine is not None:
        if mine == theirs:
            return None
        epoch, crc = mine
        return LogDiverged(
            f"{name}'s log entry {at} (epoch {theirs[0]}, crc {theirs[1]:08x}) is not this "
            f"primary's (epoch {epoch}, crc {crc:08x}): the logs diverged; it must be "
            "seeded again"
        )
    if seeded and at == last and first > last and theirs == (0, 0):
        # Neither holds an entry at ``at`` (a log that keeps none yet: a
        # board that wrote before it logged), and this primary made the
        # copy the standby holds.
        return None
    return LogTruncated(_behind(name, at, first, last))


def _behind(name: str, at: int, first: int, last: int) -> str:
    return (
        f"the log holds entries {first} to {last}; {name} has entries up to {at} and "
        "needs the ones after (and its own last, to check): it must be seeded again (Seed)"
    )
