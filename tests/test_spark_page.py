"""The nightly report tells the day (issue 41), seen in headless Chromium:
what changed since last night comes first (in, out by each way, the
backlog's growth, the slowest queues), moves are a tile, latency reads in
units a person reads, and the wide tables fit the page. Two nights made in
this process (small: no Spark), from a real board's snapshots."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from msgboard import Message, QueueSpec
from msgboard.associative import Pattern, template
from msgboard.engine import Board
from msgboard.spec import UNLIMITED, SelectorSpec
from tests.browser import chrome

pytest.importorskip("pyarrow")
pytestmark = pytest.mark.timeout(600)

from pyspark_msgboard import export, report  # noqa: E402


def _no_spark() -> None:
    raise AssertionError("a night this small needs no Spark")


def test_the_page_tells_the_day_and_fits(tmp_path: Path) -> None:
    """Given two nights of a board (a MOVE selector, a slow queue posted
    before night 1 and taken after it), I expect night 2's page to open with what changed
    since night 1 (posted +30, moved +5, backlog +10), the slowest queue
    first with its p99 in seconds, a "moved" tile, and no table wider than
    the window (the page scrolls no sideways)."""
    with Board(tmp_path / "board", sync=False) as b:
        for name in ("orders", "shipped", "slow"):
            b.create_queue(QueueSpec(name, max_history=UNLIMITED))
        ship = Pattern(templates=(template("ship", int),))
        b.create_selector(SelectorSpec("orders", ship, destination="shipped"))
        b.post("slow", [Message(tuple=("slow", i)) for i in range(5)])  # the oldest
        b.post("orders", [Message(tuple=("order", i)) for i in range(20)])
        b.take("orders", max=10)
        b.snapshot(tmp_path / "snap1")
        export.export(_no_spark, str(tmp_path / "snap1"), str(tmp_path / "history"))
        report.report(str(tmp_path / "history"), str(tmp_path / "www" / "night1"))

        b.post("orders", [Message(tuple=("order", i)) for i in range(20, 40)])
        b.post("orders", [Message(tuple=("ship", i)) for i in range(5)])  # moved on arrival
        b.take("orders", max=10)
        time.sleep(1.5)  # the slow queue's latency: at least this
        b.take("slow", max=5)  # the oldest messages, taken last
        b.snapshot(tmp_path / "snap2")
    export.export(_no_spark, str(tmp_path / "snap2"), str(tmp_path / "history"))
    r = report.report(
        str(tmp_path / "history"),
        str(tmp_path / "www" / "night2"),
        previous=str(tmp_path / "www" / "night1"),
    )
    assert r.figures["slowest"][0][0] == "slow" and r.figures["slowest"][0][1] >= 1500

    from selenium.webdriver.common.by import By

    driver = chrome()
    try:
        driver.set_window_size(1000, 900)
        driver.get((tmp_path / "www" / "night2" / "index.html").as_uri())
        day = driver.find_element(By.ID, "day")
        sections = driver.find_elements(By.TAG_NAME, "section")
        assert sections[0] == day  # what changed comes first
        rows = {
            tr.find_elements(By.TAG_NAME, "td")[0].text: tr.find_elements(By.TAG_NAME, "td")[1].text
            for tr in day.find_elements(By.TAG_NAME, "tr")
            if tr.find_elements(By.TAG_NAME, "td") and len(tr.find_elements(By.TAG_NAME, "td")) == 4
        }
        assert rows["posted"] == "+30"  # 25, and the 5 moved made again on shipped
        assert rows["moved (by a selector)"] == "+5"
        assert rows["processed (acked or taken)"] == "+15"
        assert rows["backlog (waiting)"] == "+10"  # orders +10, shipped +5, slow -5
        slow = day.find_elements(By.XPATH, ".//h3/following-sibling::div//td")
        assert slow[0].text == "slow" and slow[1].text.endswith(" s")
        tiles = [t.text for t in driver.find_elements(By.CLASS_NAME, "tile")]
        assert any(t.endswith("moved") for t in tiles)
        # Latency reads in units, not in milliseconds on a long axis.
        latency = driver.find_element(By.XPATH, "//h2[text()='Post-to-processed latency']/..")
        cells = [td.text for td in latency.find_elements(By.TAG_NAME, "td")]
        assert any(c.endswith(" s") for c in cells)
        # Nothing sideways: the wide tables scroll inside their own box.
        wide = driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth"
        )
        assert wide <= 0, f"the page is {wide} px wider than the window"
        shot = os.environ.get("MSGBOARD_REPORT_SHOT")
        if shot:
            driver.save_screenshot(shot)
    finally:
        driver.quit()
