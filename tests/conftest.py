"""Fixtures: a real board on a real LMDB directory, served over gRPC on a
loopback port from a thread of the test process (as httpx's TestServer);
and the Spark tests' local SparkSession, one per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msgboard.client import Client
from msgboard.engine import Board
from msgboard.testing import ServerThread
from tests.served import Served
from tests.twoboards import Boards


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    s = ServerThread(tmp_path / "board").start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    with Client(server.address, timeout=30) as c:
        yield c


@pytest.fixture
def stopped() -> Iterator[list[Served]]:
    """Every ``msgboard serve`` process a test starts, killed at its end
    whatever happened."""
    procs: list[Served] = []
    yield procs
    for p in procs:
        p.kill()


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    with Board(tmp_path / "board") as b:
        yield b


@pytest.fixture
def boards(tmp_path: Path) -> Iterator[Boards]:
    """Two boards, site and central (the links' tests)."""
    b = Boards(tmp_path)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="session")
def spark() -> Any:
    pytest.importorskip("pyspark")
    from pyspark_msgboard import session

    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
    s = session.session("local[2]", conf=conf)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def sweep_board(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The damage sweeps' reference board (tests/sweep.py), built once for
    the session; tests/test_damage.py and tests/test_repair.py copy it
    before they damage it."""
    from tests import sweep

    path = tmp_path_factory.mktemp("sweep") / "board"
    sweep.build(path, jobs=1500, logs=900)
    return path
