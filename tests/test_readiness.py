"""Readiness: the health service answers NOT_SERVING while the board starts
and stops, SERVING between, and --ready-file is there only while it serves."""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.served import Served, free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_health_is_not_serving_while_starting_and_stopping(tmp_path: Path) -> None:
    """Given a board whose start is held up writing its ready file (the file
    it writes first is a named pipe nobody reads yet), I expect the health
    service to answer NOT_SERVING (Check and Watch) until the test reads the
    pipe, then SERVING with the ready file in place; and on SIGTERM, with
    the Watch stream still attached, NOT_SERVING with the ready file gone
    before the board closes."""
    os.mkfifo(tmp_path / "ready.json.part")
    address = f"127.0.0.1:{free_port()}"
    s = Served(tmp_path, "--listen", address, wait=False)
    try:
        with grpc.insecure_channel(address) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""), wait_for_ready=True)
            assert next(watch).status == NOT_SERVING
            board = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service="msgboard.v1.Board"), timeout=30
            )
            assert board.status == NOT_SERVING
            assert not s.ready_file.exists()
            with open(tmp_path / "ready.json.part") as pipe:  # lets the start go on
                ready = json.loads(pipe.read())
            assert ready == {"pid": s.proc.pid, "listen": address, "metrics": ""}
            assert next(watch).status == SERVING
            assert s.ready_file.exists()
            s.proc.terminate()
            assert next(watch).status == NOT_SERVING
            assert not s.ready_file.exists()
        assert s.proc.wait(30) == 0
    finally:
        s.stop()


def test_the_ready_file_names_the_addresses_and_goes_on_stop(tmp_path: Path) -> None:
    """Given --ready-file and --metrics-listen on port 0, I expect the ready
    file to hold the pid and both bound addresses while the board serves
    (and the health service to answer SERVING), and to be gone once it has
    stopped."""
    s = Served(tmp_path, "--metrics-listen", "127.0.0.1:0")
    try:
        ready = s.wait_ready()
        assert ready["pid"] == s.proc.pid
        assert str(ready["listen"]).startswith("127.0.0.1:")
        assert str(ready["metrics"]).startswith("127.0.0.1:")
        assert ready["metrics"] != "127.0.0.1:0"
        with grpc.insecure_channel(s.address) as ch:
            r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=30)
            assert r.status == SERVING
    finally:
        assert s.stop() == 0
    assert not s.ready_file.exists()
