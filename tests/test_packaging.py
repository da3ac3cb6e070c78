"""The package's own metadata: it builds without deprecation warnings.

setuptools deprecated ``project.license`` as a TOML table (it warned three
times on every ``scripts/setup``); an SPDX string needs setuptools 77 or
newer in the build environment.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_license_is_an_spdx_string_for_a_setuptools_that_reads_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "MIT"
    [setuptools] = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    found = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert found is not None and int(found.group(1)) >= 77, setuptools
