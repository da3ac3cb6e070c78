"""The generated gRPC code is the output of scripts/gen-proto, unedited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    """Given the committed msgboard/v1 package, when I regenerate it from
    proto/, I expect the same files, byte for byte."""
    subprocess.run(
        [str(ROOT / "scripts" / "gen-proto"), str(tmp_path)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    generated = sorted(p.name for p in (tmp_path / "msgboard" / "v1").iterdir())
    committed = sorted(
        p.name for p in (ROOT / "msgboard" / "v1").iterdir() if not p.name.startswith("__pycache")
    )
    assert generated == committed
    for name in generated:
        new = (tmp_path / "msgboard" / "v1" / name).read_bytes()
        old = (ROOT / "msgboard" / "v1" / name).read_bytes()
        assert new == old, f"msgboard/v1/{name} is stale: run scripts/gen-proto"
