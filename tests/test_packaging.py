"""The package's own metadata: it builds without deprecation warnings, and
it ships what the console serves.

setuptools deprecated ``project.license`` as a TOML table (it warned three
times on every ``scripts/setup``); an SPDX string needs setuptools 77 or
newer in the build environment.
"""

from __future__ import annotations

import fnmatch
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


def test_the_console_ships_every_asset_and_template() -> None:
    """The console works offline: every file under msgboard/console/static
    and templates (htmx, uPlot, its own script and style) is package data,
    so a wheel carries it and no page asks a CDN."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = project["tool"]["setuptools"]["package-data"]["msgboard"]
    top = ROOT / "msgboard"
    files = [
        p.relative_to(top).as_posix()
        for folder in ("console/static", "console/templates")
        for p in (top / folder).rglob("*")
        if p.is_file()
    ]
    assert {"console/static/htmx-2.0.11.min.js", "console/templates/base.html"} <= set(files)
    unshipped = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert not unshipped, f"not package data: {unshipped}"
    for page in (top / "console/templates").glob("*.html"):
        found = re.search(r'(src|href)="(https?:)?//', page.read_text())
        assert found is None, f"{page.name} loads an asset from another site"
