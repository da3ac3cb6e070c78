"""Big answers serialized in pieces (msgboard/server/prebuilt.py): ListQueues
and Stats are sent as bytes joined from chunks of their repeated field, and
read back as the one message they stand for."""

from __future__ import annotations

from pathlib import Path

import pytest

from msgboard import Message
from msgboard.client import Client
from msgboard.server import prebuilt
from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb


def test_pieces_are_the_bytes_of_the_whole_message() -> None:
    """Given a head with fields set and 7 items in chunks of 3, I expect the
    joined pieces to be exactly what one SerializeToString of the whole
    message gives, and an empty list to give the head alone."""
    head = pb.StatsResponse(map_size=1 << 20, sync="fsync", commits=5)
    names = [f"q{i}" for i in range(7)]

    def fill(r: pb.StatsResponse, chunk: list[str]) -> None:
        for n in chunk:
            r.queues.add(name=n, unprocessed=len(n))

    whole = pb.StatsResponse()
    whole.CopyFrom(head)
    fill(whole, names)
    old = prebuilt.CHUNK
    prebuilt.CHUNK = 3
    try:
        assert prebuilt.pieces(head, names, fill) == whole.SerializeToString()
        assert prebuilt.pieces(head, [], fill) == head.SerializeToString()
    finally:
        prebuilt.CHUNK = old


def test_listing_and_stats_over_several_chunks_read_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given a served board of 10 queues and chunks of 3, I expect ListQueues
    to answer every queue in name order with its counts, and the whole
    board's Stats its store figures and one row per queue, as the one-queue
    Stats gives it."""
    monkeypatch.setattr(prebuilt, "CHUNK", 3)
    server = ServerThread(tmp_path / "board").start()
    try:
        with Client(server.address) as c:
            names = [f"q{i:02}" for i in range(10)]
            for n in reversed(names):
                c.create_queue(n, max_history=5)
            for i, n in enumerate(names):
                if i:
                    c.post_receipts(n, [Message(tuple=(n, k)) for k in range(i)])
            listed = c.list_queues()
            assert [v.spec.name for v in listed] == names
            assert [v.unprocessed for v in listed] == list(range(10))
            assert all(v.spec.max_history == 5 for v in listed)
            stats = c.stats()
            assert stats.store.map_size > 0 and stats.commits > 0
            assert [q.name for q in stats.queues] == names
            assert stats.queues == [c.stats(n).queues[0] for n in names]
    finally:
        server.stop()
