"""scripts/setup and scripts/test wire in the Node and Go clients' suites.

The scripts run in a copy of the repository's skeleton whose tools (npm, go,
dpkg, apt-get, sudo, and ruff, mypy and pytest in .venv) are stand-ins that
write what they were asked into a log: the story is which commands run, in
which directory, with which environment, and which are skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: A stand-in tool: logs its name, directory, arguments and chosen
#: environment variables; `npm ci` also leaves the stamp npm leaves.
FAKE = """#!/usr/bin/env bash
name=$(basename "$0")
echo "$name $(basename "$PWD") $* [GOPROXY=${GOPROXY-} GOFLAGS=${GOFLAGS-} \
BIN=${MSGBOARD_BIN:+set} EXTRA=${EXTRA-}]" >> "$LOG"
case "$name $*" in
  "npm ci"*) mkdir -p node_modules && touch node_modules/.package-lock.json ;;
  "dpkg -s"*) ! grep -qx "$2" "$MISSING" ;;
  "sudo "*) exec "$@" ;;
esac
"""


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "scripts").mkdir(parents=True)
        for script in ("setup", "test"):
            shutil.copy(ROOT / "scripts" / script, root / "scripts" / script)
        (root / "pyproject.toml").write_text("")
        tools = root / "tools"
        venv = root / ".venv" / "bin"
        for d in (tools, venv):
            d.mkdir(parents=True)
        for name in ("npm", "go", "dpkg", "apt-get", "sudo"):
            self.fake(tools / name)
        for name in ("ruff", "mypy", "pytest"):
            self.fake(venv / name)
        (venv / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
        # The lock, then both stamps: setup installs nothing with pip here.
        (root / "requirements").mkdir()
        (root / "requirements" / "dev.txt").write_text("")
        for stamp in (".installed", ".installed[dev]"):
            (root / ".venv" / stamp).touch()
        self.log = root / "log"
        self.missing = root / "missing"
        self.missing.write_text("")
        self.env = {
            **os.environ,
            "PATH": f"{tools}:{os.environ['PATH']}",
            "LOG": str(self.log),
            "MISSING": str(self.missing),
        }
        self.env.pop("MSGBOARD_PYTHON_ONLY", None)

    @staticmethod
    def fake(path: Path) -> None:
        path.write_text(FAKE)
        path.chmod(0o755)

    def node(self) -> Path:
        d = self.root / "clients" / "node"
        d.mkdir(parents=True)
        (d / "package.json").write_text("{}")
        (d / "package-lock.json").write_text("{}")
        return d

    def go(self) -> Path:
        d = self.root / "clients" / "go"
        d.mkdir(parents=True)
        (d / "go.mod").write_text("module x\n")
        return d

    def run(self, script: str, *args: str, **env: str) -> list[str]:
        """Runs scripts/<script>; returns the log lines it made."""
        self.log.write_text("")
        subprocess.run(
            [f"scripts/{script}", *args], cwd=self.root, env={**self.env, **env}, check=True
        )
        return [line for line in self.log.read_text().splitlines() if not line.startswith("dpkg")]


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "repo")


def test_setup_installs_node_packages_once_per_lock_file(repo: Repo) -> None:
    """Given clients/node with its package-lock.json, setup runs `npm ci`
    there (and installs openssl, for its TLS test, if missing); run again,
    it skips it, until the lock file changes."""
    node = repo.node()
    repo.missing.write_text("openssl\n")
    assert [line.split(" [")[0] for line in repo.run("setup", "--dev")][-2:] == [
        "apt-get repo install -y -q openssl",
        "npm node ci --no-audit --no-fund --loglevel=error",
    ]
    repo.missing.write_text("")
    assert repo.run("setup", "--dev") == []
    stamp = node / "node_modules" / ".package-lock.json"
    os.utime(stamp, (1, 1))
    assert len(repo.run("setup", "--dev")) == 1


def test_setup_installs_only_the_missing_debian_packages(repo: Repo) -> None:
    """Given clients/go with extra packages listed and two packages missing,
    setup installs just those two, then runs clients/go/setup."""
    go = repo.go()
    (go / "debian-packages").write_text("# for google.rpc types\ngolang-google-genproto-dev\n")
    (go / "setup").write_text('#!/usr/bin/env bash\necho "go-setup $(basename "$PWD")" >> "$LOG"\n')
    (go / "setup").chmod(0o755)
    repo.missing.write_text("protoc-gen-go\ngolang-google-genproto-dev\n")
    lines = [line.split(" [")[0] for line in repo.run("setup", "--dev")]
    install = "apt-get repo install -y -q protoc-gen-go golang-google-genproto-dev"
    assert lines[-1] == "go-setup go"
    assert install in lines


def test_python_only_leaves_node_and_go_alone(repo: Repo) -> None:
    """--python-only, MSGBOARD_PYTHON_ONLY=1 or no --dev: no npm, no apt."""
    repo.node()
    repo.go()
    repo.missing.write_text("golang-go\n")
    assert repo.run("setup", "--dev", "--python-only") == []
    assert repo.run("setup", "--dev", MSGBOARD_PYTHON_ONLY="1") == []
    assert repo.run("setup") == []


def test_test_runs_the_node_and_go_suites_after_pytest(repo: Repo) -> None:
    """scripts/test runs lint, types and pytest (with its arguments), then
    npm test and go test offline, each told where msgboard is."""
    repo.node()
    go = repo.go()
    (go / "vendor").mkdir()
    (go / "vendor" / "modules.txt").write_text("")
    (go / "test.env").write_text("# more environment\nEXTRA=$PWD/x\n")
    lines = repo.run("test", "-q", "-k", "x")
    assert [line.split(" [")[0] for line in lines] == [
        "npm node ci --no-audit --no-fund --loglevel=error",
        "ruff repo check .",
        "ruff repo format --check .",
        "mypy repo ",
        "pytest repo -q -k x",
        "npm node test",
        "go go test -count=1 ./...",
    ]
    assert lines[-2].endswith("BIN=set EXTRA=]")
    assert lines[-1].endswith(f"[GOPROXY=off GOFLAGS=-mod=vendor BIN=set EXTRA={go}/x]")


def test_test_python_only_skips_the_other_clients(repo: Repo) -> None:
    """--python-only is not passed to pytest, and nothing but Python runs."""
    repo.node()
    repo.go()
    lines = [line.split(" [")[0] for line in repo.run("test", "--python-only", "-q")]
    assert lines == [
        "ruff repo check .",
        "ruff repo format --check .",
        "mypy repo ",
        "pytest repo -q",
    ]
