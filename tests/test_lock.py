"""The lock (requirements/dev.txt, made by scripts/lock) agrees with
pyproject.toml, pins the generator whose output is committed, and is what
scripts/setup installed: a new release on the registry changes nothing
until someone refreshes the lock on purpose."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "dev.txt"
GENERATED = ROOT / "msgboard" / "v1"


def pins(text: str) -> dict[str, Version]:
    """The lock's ``name==version`` lines, by canonical name."""
    found: dict[str, Version] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"requirements/dev.txt:{n}: not NAME==VERSION: {line!r}"
        found[canonicalize_name(name)] = Version(version)
    return found


def requirements(project: dict[str, object], extras: tuple[str, ...]) -> list[Requirement]:
    """pyproject's requirements and those of ``extras``, with the
    project's own extras (``msgboard[spark]``) expanded, for this
    machine (environment markers applied)."""
    table: dict[str, list[str]] = project["optional-dependencies"]  # type: ignore[assignment]
    own = canonicalize_name(str(project["name"]))
    todo = list(project["dependencies"]) + [r for e in extras for r in table[e]]  # type: ignore[call-overload]
    out: list[Requirement] = []
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate(dict(default_environment())):
            continue
        if canonicalize_name(req.name) == own:
            todo += [r for e in req.extras for r in table[e]]
        else:
            out.append(req)
    return out


def disagreements(lock: dict[str, Version], reqs: list[Requirement]) -> list[str]:
    """What of ``reqs`` the lock leaves out or pins outside its range."""
    wrong = []
    for req in reqs:
        pinned = lock.get(canonicalize_name(req.name))
        if pinned is None:
            wrong.append(f"{req.name}: in pyproject.toml, not in the lock")
        elif not req.specifier.contains(pinned, prereleases=True):
            wrong.append(f"{req.name}: the lock has {pinned}, pyproject.toml asks {req.specifier}")
    return wrong


def project() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    table: dict[str, object] = data["project"]
    return table


def test_the_lock_pins_every_requirement_within_its_range() -> None:
    """Given pyproject.toml and the lock, I expect every requirement of the
    package and of the extras scripts/setup and bench-compare install to
    be pinned, each inside the range pyproject.toml gives."""
    reqs = requirements(project(), ("dev", "bench"))
    assert len(reqs) > 20
    assert disagreements(pins(LOCK.read_text()), reqs) == []


def test_the_check_catches_a_lock_that_disagrees() -> None:
    """The check above fails when a pin falls outside a range or is missing."""
    reqs = [Requirement("grpcio>=1.85,<2"), Requirement("lmdb>=1.4")]
    assert disagreements({"grpcio": Version("1.85.4"), "lmdb": Version("3.0")}, reqs) == []
    assert disagreements({"grpcio": Version("1.80.0"), "lmdb": Version("3.0")}, reqs) == [
        "grpcio: the lock has 1.80.0, pyproject.toml asks <2,>=1.85"
    ]
    assert disagreements({"grpcio": Version("1.85.4")}, reqs) == [
        "lmdb: in pyproject.toml, not in the lock"
    ]


def test_the_lock_pins_the_generator_of_the_committed_code() -> None:
    """The generated code names the grpcio-tools that made it: the lock
    pins that one, so regenerating on any machine set up from this commit
    gives the same bytes (tests/test_proto.py)."""
    text = (GENERATED / "board_pb2_grpc.py").read_text()
    made_with = re.search(r"GRPC_GENERATED_VERSION = '([^']+)'", text)
    assert made_with is not None
    assert pins(LOCK.read_text())[canonicalize_name("grpcio-tools")] == Version(made_with[1])


def test_users_ranges_admit_no_runtime_older_than_the_generated_code() -> None:
    """The generated code refuses to import under a grpcio older than its
    generator, or a protobuf older than (or of another major than) the
    protoc that wrote it: pyproject.toml's ranges for users say so."""
    reqs = {canonicalize_name(r.name): r.specifier for r in requirements(project(), ())}
    grpc_made = re.search(
        r"GRPC_GENERATED_VERSION = '([^']+)'", (GENERATED / "board_pb2_grpc.py").read_text()
    )
    proto_made = re.search(
        r"Protobuf Python Version: (\S+)", (GENERATED / "board_pb2.py").read_text()
    )
    assert grpc_made is not None and proto_made is not None
    assert lowest(reqs["grpcio"]) >= Version(grpc_made[1])
    protobuf = Version(proto_made[1])
    assert lowest(reqs["protobuf"]) >= protobuf
    assert not reqs["protobuf"].contains(f"{protobuf.major + 1}.0.0")


def lowest(spec: SpecifierSet) -> Version:
    """The lower bound a ``>=`` of ``spec`` sets (0 without one)."""
    bounds = [Version(s.version) for s in spec if s.operator in (">=", "==", "~=")]
    return max(bounds, default=Version("0"))


def test_setup_installed_the_locked_versions() -> None:
    """Given the venv scripts/setup made, I expect each locked package it
    holds at the locked version (setup installs with the lock as pip
    constraints, and again whenever the lock changes)."""
    lock = pins(LOCK.read_text())
    installed = {
        canonicalize_name(d.metadata["Name"]): Version(d.version) for d in metadata.distributions()
    }
    off = {
        name: (str(installed[name]), str(version))
        for name, version in lock.items()
        if name in installed and installed[name] != version
    }
    assert off == {}, "installed, locked: run scripts/setup --dev"
    assert sum(name in installed for name in lock) > 50
