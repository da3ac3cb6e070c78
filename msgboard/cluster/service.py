"""The replication service (``proto/msgboard/v1/replication.proto``):
``ReplicationService``, thin, on the board's own port beside the Board
service.

Every call must carry the cluster's token (metadata ``TOKEN_KEY``),
compared in constant time; the client-facing users and permissions do not
apply to it (``security/guard.py`` leaves the service to this check).

``Follow``: a standby's ``hello`` names the first index it needs; the
stream sends every committed entry from there, in batches, as they come
(``Shipper``), and each ``ack`` tells ``SyncGate`` how far the standby has
applied and fsynced. A standby whose index the log no longer holds gets
FAILED_PRECONDITION ``LogTruncated`` (it must be seeded again);
one ahead of the primary's log, FAILED_PRECONDITION too. ``Seed``: a
hot copy of the board (``Board.snapshot_async``, written beside its
directory and removed after), streamed as its data.mdb's bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from msgboard.cluster.role import Role
from msgboard.cluster.shipper import Shipper
from msgboard.cluster.sync import SyncGate
from msgboard.details import abort
from msgboard.engine import Board
from msgboard.errors import FailedPrecondition, InvalidArgument, LogTruncated, Unauthenticated
from msgboard.v1 import replication_pb2 as rpb
from msgboard.v1 import replication_pb2_grpc as rpb_grpc

log = logging.getLogger(__name__)

#: The metadata key of the cluster's token.
TOKEN_KEY = "x-msgboard-replication-token"
#: The bytes of one Seed chunk.
CHUNK = 1 << 20
#: How often an idle stream sends an empty batch (the primary's last index).
HEARTBEAT = 1.0


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

    async def Follow(
        self, requests: AsyncIterator[rpb.FollowRequest], context: Any
    ) -> AsyncIterator[rpb.FollowResponse]:
        await self._check(context)
        board, shipper, gate = self._board, self._shipper, self._gate
        assert board is not None and shipper is not None  # _check
        first = await anext(aiter(requests), None)
        if first is None or not first.HasField("hello"):
            await abort(
                context, InvalidArgument("a Follow stream starts with a hello", field="hello")
            )
        name = first.hello.board or context.peer()
        start = first.hello.from_index
        lo, hi = await asyncio.to_thread(board.log_bounds)
        if start < max(lo, 1) and start != hi + 1:
            await abort(
                context,
                LogTruncated(
                    f"the log holds entries {lo} to {hi}; {name} needs {start} on: "
                    "it must be seeded again (Seed)"
                ),
            )
        if start > hi + 1:
            await abort(
                context,
                FailedPrecondition(
                    f"{name} needs entry {start}, past this primary's last, {hi}: "
                    "it holds writes this primary does not"
                ),
            )
        log.info("standby %s follows from log index %d", name, start)
        woken = shipper.attach()
        acks = asyncio.create_task(self._acks(requests, name, gate))
        if gate is not None:
            gate.connected(name, start - 1)
        try:
            while not acks.done():
                woken.clear()
                entries = await shipper.read(start)
                if entries:
                    start += len(entries)
                    yield rpb.FollowResponse(entries=entries, last=start - 1)
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), HEARTBEAT)
                if not woken.is_set():
                    yield rpb.FollowResponse(last=start - 1)
        finally:
            shipper.detach(woken)
            acks.cancel()
            if gate is not None:
                gate.gone(name)
            log.info("standby %s stopped following at log index %d", name, start - 1)

    async def Seed(self, request: rpb.SeedRequest, context: Any) -> AsyncIterator[rpb.SeedChunk]:
        await self._check(context)
        board = self._board
        assert board is not None  # _check
        beside = os.path.dirname(os.path.abspath(board.path))
        where = tempfile.mkdtemp(prefix=".msgboard-seed-", dir=beside)
        try:
            copy = os.path.join(where, "copy")
            await asyncio.wrap_future(board.snapshot_async(copy))
            log.info("seeding standby %s from a copy of this board", request.board)
            with open(os.path.join(copy, "data.mdb"), "rb") as f:
                while chunk := await asyncio.to_thread(f.read, CHUNK):
                    yield rpb.SeedChunk(data=chunk)
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
        self, requests: AsyncIterator[rpb.FollowRequest], name: str, gate: SyncGate | None
    ) -> None:
        async for r in requests:
            if r.HasField("ack") and gate is not None:
                gate.ack(name, r.ack.index)
