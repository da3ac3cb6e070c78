"""A standby's console links to the primary's (issue 35 item 7).

A board of a cluster (``msgboard serve --cluster``, etcd from
tests/cluster.py) publishes its console's URL in its leader key once it
leads; a standby's console says it is a standby and links there, in a real
browser. A primary that published none (no console, or a board from before
it was published) is linked by a guess: its host, this console's port
(``context.primary_console``), said to be one, at the HTTP level.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from msgboard.config import ServeConfig
from msgboard.server.node import console_url
from tests.browser import browser, click, wait_for
from tests.cluster import Boards, EtcdCluster, etcd_cluster

__all__ = ["browser"]  # a fixture, used by name

etcd = pytest.fixture(scope="module")(etcd_cluster)


def _console(boards: Boards, name: str) -> str:
    served = boards.procs[name]
    assert served is not None
    return "http://" + str(json.loads(served.ready_file.read_text())["metrics"])


def test_a_standbys_console_links_to_the_primarys(
    tmp_path: Path, etcd: EtcdCluster, browser: Any
) -> None:
    # Given two boards of a cluster, each serving its console,
    boards = Boards(tmp_path, etcd.endpoints, "linked", "--metrics-listen", "127.0.0.1:0", size=2)
    try:
        boards.start()
        p = boards.primary()
        [s] = [n for n in boards.names if n != p]
        # when I open the standby's console, it says it is a standby, names
        # the primary and links to the primary's console,
        browser.get(_console(boards, s) + "/")
        link = wait_for(browser, lambda d: d.find_elements(By.ID, "primary-console"))[0]
        assert "standby" in browser.find_element(By.ID, "standby").text
        assert boards.address(p) in browser.find_element(By.ID, "primary").text
        assert link.get_attribute("href") == _console(boards, p) + "/"
        assert "did not say" not in browser.find_element(By.ID, "primary").text
        # (its Cluster page too),
        browser.get(_console(boards, s) + "/cluster")
        wait_for(browser, lambda d: "standby" in d.find_element(By.ID, "role").text)
        href = browser.find_element(By.ID, "primary-console").get_attribute("href")
        assert href == _console(boards, p) + "/"
        # and the link opens the primary's overview.
        click(browser, "#primary-console")
        wait_for(browser, lambda d: d.find_elements(By.ID, "queue-rows"), message="its overview")
        assert browser.current_url == _console(boards, p) + "/"
    finally:
        boards.stop()


def test_a_primary_that_published_no_console_is_linked_on_this_consoles_port() -> None:
    """A standby whose primary's key names no console: the link is the
    primary's host on the port this console was reached at, and the page
    says it is a guess; with a published one, that one."""
    from aiohttp.test_utils import TestClient, TestServer

    from msgboard.cluster import Role
    from msgboard.console import Console, create_app

    async def page(published: str) -> tuple[int, str]:
        role = Role("127.0.0.9:7001", leading=False, epoch=3)
        console = Console(None, role=role, primary_console=lambda: published)
        async with TestClient(TestServer(create_app(console))) as client:
            r = await client.get("/", headers={"Accept": "text/html"})
            return client.port, await r.text()

    port, text = asyncio.run(page(""))
    assert f'href="http://127.0.0.9:{port}/"' in text
    assert "did not say where its console is" in text
    _, text = asyncio.run(page("https://primary.example:9443/"))
    assert 'href="https://primary.example:9443/"' in text
    assert "did not say" not in text


def test_the_url_a_board_publishes_for_its_console() -> None:
    config = ServeConfig(data="d")
    assert console_url(config, "", "10.0.0.5:7000") == ""
    assert console_url(config, "127.0.0.1:9100", "10.0.0.5:7000") == "http://127.0.0.1:9100/"
    # Listening on every interface: the host its clients reach it at.
    assert console_url(config, "0.0.0.0:9100", "10.0.0.5:7000") == "http://10.0.0.5:9100/"
    assert console_url(config, "[::]:9100", "[fd00::5]:7000") == "http://[fd00::5]:9100/"
    assert re.fullmatch(r"https://\S+", console_url(_tls(), "0.0.0.0:9100", "b0:7000"))


def _tls() -> ServeConfig:
    return ServeConfig(data="d", tls_cert="c.pem", tls_key="k.pem")
