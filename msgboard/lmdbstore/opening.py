"""What a store checks before LMDB maps a data directory, and records once
it has: the start-up half of "damage is never fatal, never silent".

``vet`` runs after the directory lock and ``datafile.check`` (truncation):
the marker and the commit sidecar decide whether the directory may be
served (``sidecar.startup``: no silent empty board, no silent rollback),
then the pages of every tree are verified by hand (``verify.py``, shallow)
unless ``data.mdb`` is unchanged since this board's last commit. Any damage
LMDB could trip on (an assertion abort, a read outside its map) refuses the
start with one DataFileDamaged line naming the queues and ``msgboard
check``; a verified file stays safe while served, since LMDB then reads only
pages it verified or wrote itself.

``adopt`` runs once the store has loaded: it writes the marker of a new
board (or of one made before markers) and opens the sidecar at the file's
last commit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import lmdb

from msgboard.errors import DataFileDamaged
from msgboard.lmdbstore import sidecar
from msgboard.lmdbstore.salvage import refusal, salvage
from msgboard.lmdbstore.sidecar import Sidecar, Verdict
from msgboard.lmdbstore.verify import verify

log = logging.getLogger("msgboard.store")


def vet(path: str, *, init: bool, sync: bool, accept: bool) -> Verdict:
    """The start-up verdict for the directory ``path``; DataFileDamaged (one
    line) when it must not be served. ``init``: make a new board where one
    was lost; ``accept``: serve a data file behind its sidecar. Logs
    nothing: ``adopt`` logs once the board has opened, so that a refusal is
    the only line."""
    verdict = sidecar.startup(path, init=init, synced=sync, accept_rollback=accept)
    if verdict.new or not verdict.verify:
        return verdict
    t = time.monotonic()
    report = verify(path, deep=False)
    if not report.ok:  # name the queues: a second, salvaging walk
        raise DataFileDamaged(refusal(path, salvage(path, deep=False)))
    took = f"{report.pages_read} pages verified in {time.monotonic() - t:.2f} s"
    return replace(verdict, checked=took)


def adopt(path: str, env: lmdb.Environment, verdict: Verdict) -> Sidecar:
    """The open sidecar of the loaded board at ``path``, at its last commit;
    writes the board's marker first if it has none."""
    if verdict.note:
        log.warning("%s", verdict.note)
    if not verdict.new:
        log.debug("%s: %s", path, verdict.checked or "data.mdb unchanged since the last commit")
    board = None if verdict.new else sidecar.read_marker(path)
    if not board:
        board = sidecar.new_board_id()
        sidecar.write_marker(path, board, time.time_ns() // 1000)
    side = Sidecar(path, board)
    side.write(env.info()["last_txnid"])
    return side
