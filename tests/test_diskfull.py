"""A full disk refuses writes cleanly: RESOURCE_EXHAUSTED, nothing answered
is lost, and the board keeps serving, also after a restart.

The server's data directory is a 4 MiB tmpfs in a mount namespace of its own
(``unshare``), held open by a sleeping process so that the server can be
started in it twice (``nsenter``). Only this test's processes see the mount.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from msgboard.client import Client
from msgboard.errors import StoreFull
from msgboard.spec import UNLIMITED
from msgboard.testing import ServerProcess

BODY = b"x" * 65536


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """A directory that is a 4 MiB tmpfs for the commands run with the
    returned prefix."""
    disk = tmp_path / "disk"
    disk.mkdir()
    holder = subprocess.Popen(
        ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=4m tmpfs {disk} && exec sleep 600"],
    )
    try:
        prefix = ["nsenter", "-t", str(holder.pid), "-U", "-m", "--preserve-credentials"]
        for _ in range(100):  # until the mount is in place
            probe = subprocess.run([*prefix, "df", "--output=size", str(disk)], capture_output=True)
            if b"4096" in probe.stdout:
                break
            subprocess.run(["sleep", "0.05"])
        else:
            raise RuntimeError("could not mount a tmpfs in a namespace")
        yield disk, prefix
    finally:
        holder.kill()
        holder.wait()


def size(prefix: list[str], path: Path) -> int | None:
    """The size of a file on the small disk (seen only in its namespace)."""
    run = subprocess.run([*prefix, "stat", "-c", "%s", str(path)], capture_output=True)
    return int(run.stdout) if run.returncode == 0 else None


def test_a_full_disk_refuses_writes_cleanly(small_disk: tuple[Path, list[str]]) -> None:
    """Given a board on a 4 MiB disk, when I post 64 KiB messages until it is
    full, I expect RESOURCE_EXHAUSTED saying the disk is full, every answered
    post readable, reads still served, and all of it intact after a restart."""
    disk, prefix = small_disk
    server = ServerProcess(disk / "board", prefix=prefix)
    acked: list[int] = []
    try:
        with Client(server.address, timeout=30) as c:
            c.create_queue("q")
            with pytest.raises(StoreFull, match="disk full"):
                for i in range(1000):
                    acked.append(c.post("q", (i,), body=BODY))
            assert len(acked) > 10
            # The board carries on: what was answered is there to read.
            assert c.get_queue("q").unprocessed == len(acked)
            [first] = c.read("q")
            assert first.seq == acked[0] and first.body == BODY
    finally:
        assert server.stop() == 0
    server = ServerProcess(disk / "board", prefix=prefix)
    try:
        with Client(server.address, timeout=30) as c:
            page = c.browse("q", limit=10_000)
            assert [m.seq for m in page.messages] == acked
            assert [m.tuple for m in page.messages] == [(i,) for i in range(len(acked))]
            assert all(m.body == BODY for m in page.messages)
    finally:
        assert server.stop() == 0


def test_a_full_disk_still_lets_deletes_takes_and_acks_make_room(
    small_disk: tuple[Path, list[str]],
) -> None:
    """Given a board on a 4 MiB disk filled by posts until they are refused,
    when I take, ack a lease and delete the full queue, I expect each to go
    through (the store keeps a reserve of the disk for them), and posting to
    work again after."""
    disk, prefix = small_disk
    server = ServerProcess(disk / "board", prefix=prefix)
    try:
        with Client(server.address, timeout=30) as c:
            c.create_queue("keep", max_history=UNLIMITED)
            c.post("keep", ("a",), body=BODY)
            c.post("keep", ("b",), body=BODY)
            c.create_queue("q", max_history=UNLIMITED)
            with pytest.raises(StoreFull, match="disk full"):
                for i in range(1000):
                    c.post("q", (i,), body=BODY)
            with pytest.raises(StoreFull):  # still full
                c.post("keep", ("c",), body=BODY)
            # A take moves a message into history; a leased take and its ack too.
            [taken] = c.take("keep")
            assert taken.tuple == ("a",)
            [lease] = c.take_leased("keep", lease=60)
            c.ack("keep", [lease])
            assert c.get_queue("keep").history == 2
            # The full queue can be deleted, and then there is room again.
            c.delete_queue("q")
            c.create_queue("q")
            assert [c.post("q", (i,), body=BODY) for i in range(5)] == [1, 2, 3, 4, 5]
    finally:
        assert server.stop() == 0


def test_a_disk_filled_by_another_process_still_lets_a_delete_through(
    small_disk: tuple[Path, list[str]],
) -> None:
    """Given a board whose disk another process fills to the last byte, I
    expect posts refused and the board's reserve file released, so that a
    take and a delete go through; posts then use the pages freed, and the
    reserve is allocated again once the other file is gone."""
    disk, prefix = small_disk
    server = ServerProcess(disk / "board", prefix=prefix)
    try:
        reserve = disk / "board" / "msgboard.reserve"
        assert size(prefix, reserve) == 256 * 1024
        with Client(server.address, timeout=30) as c:
            c.create_queue("q", max_history=UNLIMITED)
            for i in range(10):
                c.post("q", (i,), body=BODY)
            filler = disk / "filler"
            fill = subprocess.run(
                [*prefix, "dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True
            )
            assert b"No space left" in fill.stderr
            with pytest.raises(StoreFull, match="kept for deletes, takes and acks"):
                c.post("q", ("more",), body=BODY)
            assert size(prefix, reserve) is None  # released for what follows
            [taken] = c.take("q")
            assert taken.tuple == (0,)
            c.delete_queue("q")
            # The pages the delete freed take posts again.
            c.create_queue("r")
            assert c.post("r", (1,), body=BODY) == 1
            subprocess.run([*prefix, "rm", str(filler)], check=True)
            assert c.post("r", (2,), body=BODY) == 2
        assert size(prefix, reserve) == 256 * 1024  # allocated again
    finally:
        assert server.stop() == 0
