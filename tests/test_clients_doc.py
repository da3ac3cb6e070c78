"""The JSON examples of docs/clients.md are true: sent in document order to a
real board, each request is answered as the page says.

A ```json block tagged ``request:Method`` is parsed with ``json_format``
against the method's request type (unknown fields refused) and sent; the
next block tagged ``response:Method`` must match the answer, in the JSON
mapping, as conformance cases match (tests/test_conformance.py: keys shown
must be equal, keys left out are not checked; the null value is written
``"NULL_VALUE"``, as grpcurl prints it). A string ``"${name}"`` in a
response captures that part of the answer for later requests. A request
that fails must be followed by a ```text block quoting the error's message.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from msgboard.testing import ServerThread
from msgboard.v1 import board_pb2 as pb
from msgboard.v1 import board_pb2_grpc as pb_grpc
from tests.test_conformance import Failure, match

PAGE = Path(__file__).resolve().parent.parent / "docs" / "clients.md"
BLOCK = re.compile(r"^```(\w+)[ \t]*(\S*)\n(.*?)^```$", re.M | re.S)
VAR = re.compile(r"\$\{(\w+)\}")
SERVICE = pb.DESCRIPTOR.services_by_name["Board"]


def examples() -> list[tuple[str, str, str]]:
    """(language, tag, text) of every fenced block of the page."""
    return [(m[1], m[2], m[3]) for m in BLOCK.finditer(PAGE.read_text())]


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[Any]:
    server = ServerThread(tmp_path / "board").start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            yield pb_grpc.BoardStub(channel)
    finally:
        server.stop()


def test_every_json_block_is_a_tagged_example() -> None:
    tags = [tag for lang, tag, _ in examples() if lang == "json"]
    assert tags, "docs/clients.md has no JSON examples"
    for tag in tags:
        kind, _, method = tag.partition(":")
        assert kind in ("request", "response") and method in SERVICE.methods_by_name, tag


def test_the_json_examples_run_as_shown(stub: Any) -> None:
    variables: dict[str, Any] = {}
    blocks = examples()
    answer: dict[str, Any] | None = None
    for i, (lang, tag, text) in enumerate(blocks):
        if lang != "json":
            continue
        kind, _, name = tag.partition(":")
        method = SERVICE.methods_by_name[name]
        body = json.loads(text)
        if kind == "request":
            request = getattr(pb, method.input_type.name)()
            json_format.ParseDict(_fill(body, variables), request)
            try:
                answer = as_grpcurl(
                    json_format.MessageToDict(getattr(stub, name)(request, timeout=30))
                )
            except grpc.RpcError as e:
                quoted = blocks[i + 1] if i + 1 < len(blocks) else ("", "", "")
                assert quoted[0] == "text" and f"Message: {e.details()}" in quoted[2], (
                    f"{name} failed ({e.details()}) and the page does not say so"
                )
                for field in Failure(e).fields:
                    assert f'"field":"{field}"' in quoted[2], f"the page lacks {field}"
                answer = None
        else:
            assert answer is not None, f"response:{name} follows no answered request"
            _capture(body, answer, variables)
            match(_fill(body, variables), answer)


def as_grpcurl(value: Any) -> Any:
    """``json_format``'s answer as grpcurl prints it: the null value
    (``google.protobuf.NullValue``) by its name, ``"NULL_VALUE"``, not ``null``."""
    if isinstance(value, dict):
        return {
            k: "NULL_VALUE" if k == "null" and v is None else as_grpcurl(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [as_grpcurl(v) for v in value]
    return value


def _fill(value: Any, variables: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, variables) for v in value]
    if isinstance(value, str) and (m := VAR.fullmatch(value)):
        return variables[m[1]]
    return value


def _capture(shown: Any, answer: Any, variables: dict[str, Any]) -> None:
    """Saves the parts of ``answer`` that ``shown`` writes as ``"${name}"``."""
    if isinstance(shown, dict) and isinstance(answer, dict):
        for k, v in shown.items():
            _capture(v, answer.get(k), variables)
    elif isinstance(shown, list) and isinstance(answer, list):
        for s, a in zip(shown, answer, strict=False):
            _capture(s, a, variables)
    elif isinstance(shown, str) and (m := VAR.fullmatch(shown)) and m[1] not in variables:
        variables[m[1]] = answer


# -- the Node and Go blocks ----------------------------------------------------

ROOT = PAGE.parent.parent
NODE_DIR = ROOT / "clients" / "node"
GO_DIR = ROOT / "clients" / "go"
#: What a block may take, its build included; a block that waits forever
#: (a subscription to an empty queue) fails here instead of hanging.
BLOCK_SECONDS = 300


def _blocks(*langs: str) -> list[str]:
    found = [text for lang, _, text in examples() if lang in langs]
    assert found, f"docs/clients.md has no {'/'.join(langs)} block"
    return found


def _run(cmd: list[str], cwd: Path, **kw: Any) -> str:
    done = subprocess.run(
        cmd,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BLOCK_SECONDS,
        **kw,
    )
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}"
    return done.stdout


@pytest.fixture
def board(tmp_path: Path) -> Iterator[ServerThread]:
    server = ServerThread(tmp_path / "board").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(600)  # the build, on a loaded machine
def test_the_node_blocks_run_and_end(board: ServerThread, tmp_path: Path) -> None:
    """Given a board, I expect each js block of the page, as a module of a
    program of its own importing the client, to run to its end within
    the deadline (the example once took the only message, then waited
    forever on an empty queue)."""
    if shutil.which("node") is None or not (NODE_DIR / "node_modules").is_dir():
        pytest.skip("no Node.js or no clients/node/node_modules (scripts/setup --dev)")
    built = NODE_DIR / "dist" / "src" / "index.js"
    sources = list((NODE_DIR / "src").glob("*.ts"))
    if not built.exists() or built.stat().st_mtime < max(p.stat().st_mtime for p in sources):
        _run(["npm", "run", "build"], NODE_DIR)
    app = tmp_path / "app"
    (app / "node_modules").mkdir(parents=True)
    (app / "node_modules" / "msgboard").symlink_to(NODE_DIR)
    (app / "package.json").write_text('{"type": "module"}\n')
    for i, text in enumerate(_blocks("js", "javascript")):
        main = app / f"block{i}.mjs"
        main.write_text(text.replace("127.0.0.1:7878", board.address))
        _run(["node", str(main)], app)


def _go_program(body: str) -> str:
    """``body`` as the function ``run`` of a main package, with the imports
    it uses."""
    imports = ['msgboard "github.com/msgboard/msgboard/clients/go"']
    imports += [f'"{p}"' for p in ("context", "fmt", "time") if f"{p}." in body]
    indented = "\n".join("\t" + line if line else line for line in body.splitlines())
    return (
        "package main\n\nimport (\n"
        + "".join(f"\t{i}\n" for i in imports)
        + '\t"os"\n)\n\nfunc run() error {\n'
        + indented
        + "\n}\n\nfunc main() {\n\tif err := run(); err != nil {\n"
        + "\t\tfmt.Fprintln(os.Stderr, err)\n\t\tos.Exit(1)\n\t}\n}\n"
    )


@pytest.mark.timeout(900)  # a first build of gRPC on a loaded machine
def test_the_go_blocks_run(board: ServerThread, tmp_path: Path) -> None:
    """Given a board, I expect each go block of the page, as the body of
    ``func run() error`` in a program of its own module built offline
    against the checkout (clients/go/scripts/vendor-app), to build and run
    without error."""
    if shutil.which("go") is None or not (GO_DIR / "vendor" / "modules.txt").exists():
        pytest.skip("no Go toolchain or no clients/go/vendor (scripts/setup --dev)")
    env = {**os.environ, "GOPROXY": "off", "GOFLAGS": ""}
    for i, body in enumerate(_blocks("go")):
        app = tmp_path / f"app{i}"
        app.mkdir()
        program = _go_program(body.replace("127.0.0.1:7878", board.address))
        if "fmt." not in body:
            program = program.replace("import (\n", 'import (\n\t"fmt"\n', 1)
        (app / "main.go").write_text(program)
        _run(["go", "mod", "init", f"example.com/docs{i}"], app, env=env)
        _run([str(GO_DIR / "scripts" / "vendor-app"), "."], app, env=env)
        _run(["go", "run", "."], app, env=env)


def test_npm_pack_in_a_fresh_checkout_says_to_run_npm_ci(tmp_path: Path) -> None:
    """Given clients/node as a fresh clone has it (no node_modules, no
    dist), I expect `npm pack` to stop saying to run `npm ci` first, not
    with a bare `tsc: not found`, and the README's install steps to run
    `npm ci` before `npm pack`."""
    if shutil.which("npm") is None:
        pytest.skip("no npm")
    fresh = tmp_path / "clone"
    shutil.copytree(ROOT / "proto", fresh / "proto")
    shutil.copytree(
        NODE_DIR, fresh / "clients" / "node", ignore=shutil.ignore_patterns("node_modules", "dist")
    )
    done = subprocess.run(
        ["npm", "pack", "--pack-destination", str(tmp_path)],
        cwd=fresh / "clients" / "node",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BLOCK_SECONDS,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0
    assert "run `npm ci` in this directory first" in said, said
    assert "not found" not in said, said
    readme = (NODE_DIR / "README.md").read_text()
    section = readme[readme.index("## Installing it outside the checkout") :]
    steps = section[section.index("```sh") :]
    assert steps.index("npm ci") < steps.index("npm pack")


def test_the_null_value_is_shown_in_its_portable_form() -> None:
    """Wherever CHANGELOG.md or a page shows the JSON null value
    `{"null": null}`, which grpcurl refuses, the same sentence shows the form
    every tool takes, `"NULL_VALUE"` (issue 35 item 20)."""
    for path in [ROOT / "CHANGELOG.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            if '{"null": null}' in line:
                near = "\n".join(lines[max(0, n - 3) : n + 4])  # its sentence, wrapped
                assert "NULL_VALUE" in near, f"{path.name}:{n + 1}: {line[:120]}"
