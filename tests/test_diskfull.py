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
