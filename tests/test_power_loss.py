"""A power loss keeps what was synced and drops the rest: the store leaves
each commit's meta page to the next sync (``durable.py``, one barrier per
commit), so these tests copy the data file as a power loss would leave it
(the meta page written since the last sync dropped) and open the copy.
Nothing answered may be missing from it, and the copy must open whole."""

from __future__ import annotations

import shutil
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from msgboard import Message, QueueSpec
from msgboard.engine import Board
from msgboard.lmdbstore import DurableStore, durable
from tests.stores import make, post

PSIZE = 4096


@pytest.fixture(autouse=True)
def deferred(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are of the deferred meta sync: on whatever the default."""
    monkeypatch.setattr(durable, "DEFER_META_SYNC", True)


class Disk:
    """What a power loss would leave of the store's data file: the file as
    written, but in the meta page slot of the commit no sync has covered
    yet (``store.unsynced``; LMDB alternates two slots, txnid % 2) what was
    there before that commit. Watches the store's commits and syncs (on
    the writer's thread)."""

    def __init__(self, store: DurableStore) -> None:
        self.store = store
        self.file = Path(store.path) / "data.mdb"
        self.meta = self._pages()
        self.lost = b""
        committed, flush = store._committed, store.flush

        def on_commit(txnid: int) -> None:
            slot = txnid % 2
            self.lost = self.meta[slot * PSIZE : (slot + 1) * PSIZE]
            committed(txnid)
            self.meta = self._pages()

        def on_flush() -> None:
            flush()
            self.meta = self._pages()

        store._committed = on_commit  # type: ignore[method-assign]
        store.flush = on_flush  # type: ignore[method-assign]

    def _pages(self) -> bytes:
        with open(self.file, "rb") as f:
            return f.read(2 * PSIZE)

    def image(self, dst: Path) -> None:
        """Writes the directory ``dst`` holding the file as a power loss
        would leave it now."""
        dst.mkdir()
        data = bytearray(self.file.read_bytes())
        if self.store.unsynced:
            slot = self.store.unsynced % 2
            data[slot * PSIZE : (slot + 1) * PSIZE] = self.lost
        (dst / "data.mdb").write_bytes(bytes(data))


def opened(path: Path) -> DurableStore:
    # No marker and no sidecar in the copy: it opens as a board from before
    # markers would (opening.py), after LMDB's and our own checks.
    return DurableStore(path)


def test_a_commit_is_whole_before_its_meta_page_is_synced_and_durable_after(
    tmp_path: Path,
) -> None:
    s = DurableStore(tmp_path / "board")
    disk = Disk(s)
    try:
        make(s)
        post(s, 1)
        s.flush()
        assert s.unsynced == 0
        post(s, 1)  # step 2: data synced, meta page written, no sync
        assert s.unsynced
        disk.image(tmp_path / "lost")
        s.flush()  # step 3: durable
        assert s.unsynced == 0
        disk.image(tmp_path / "kept")
    finally:
        s.close()
    for name, expect in (("lost", 1), ("kept", 2)):
        c = opened(tmp_path / name)
        try:
            with c.begin() as txn:
                info = txn.queue("q")
                assert info is not None
                assert c._cache.queues["q"].next_seq - 1 == expect, name
        finally:
            c.close()


def test_no_answered_post_is_lost_when_the_power_goes_at_an_answer(tmp_path: Path) -> None:
    """Posters on four threads; at every 10th answer (on the writer
    thread, as it answers) the disk as a power loss would leave it is
    copied, with the seqs answered so far. Every copy opens and holds them."""
    data = tmp_path / "data"
    images: list[tuple[Path, int]] = []
    answered: list[int] = []
    lock = threading.Lock()
    with Board(data) as board:
        board.create_queue(QueueSpec(name="q"))
        disk = Disk(board._durable)

        def seen(fut: Future[Any]) -> None:
            if fut.exception() is not None:
                return
            with lock:
                answered.extend(fut.result())
                # Only as the writer answers (not from a poster's thread
                # that added the callback late): the file stands still.
                writing = board._writer.on_thread()
                if writing and len(answered) % 10 == 0 and len(images) < 20:
                    dst = tmp_path / f"image{len(images)}"
                    disk.image(dst)
                    images.append((dst, max(answered)))

        def poster() -> None:
            for _ in range(100):
                fut = board.post_async("q", [Message(body=b"x")])
                fut.add_done_callback(seen)
                fut.result(60)

        threads = [threading.Thread(target=poster) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert len(answered) == 400  # the writer has run every callback
    assert images
    for path, top in images:
        c = opened(path)
        try:
            with c.begin() as txn:
                assert txn.queue("q") is not None
            assert c._cache.queues["q"].next_seq - 1 >= top, path
        finally:
            c.close()
        shutil.rmtree(path)
