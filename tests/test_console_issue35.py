"""The console as issue 35's user met it, in a real browser.

Given a board served with its console and headless Chromium (``browser.py``):
the overview's out /s counts a queue drained by a Subscribe consumer; a
failed bulk action on Dead letters keeps the list and shows the error above
it; kick and release ask first; a forbidden page is the console's own page
with the reason, and a reader sees no Post button, checkbox or queue name
she may not use.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from selenium.webdriver.common.by import By

from msgboard.client import Client
from tests.browser import (
    READER,
    ConsoleBoard,
    browser,
    click,
    console_board,
    sign_in,
    users_board,
    wait_for,
)
from tests.test_console import cell
from tests.test_console_pages import press

__all__ = ["browser", "console_board", "users_board"]  # fixtures, used by name


def test_out_counts_a_queue_drained_by_subscribe(console_board: ConsoleBoard, browser: Any) -> None:
    # Given a queue drained by a Subscribe consumer that acks each message
    # (no Take anywhere), while messages keep arriving,
    stop = threading.Event()
    with console_board.client() as c:
        c.create_queue("orders.eu")

        def feed() -> None:
            with console_board.client() as p:
                while not stop.is_set():
                    p.post("orders.eu", ("order", 1))
                    time.sleep(0.05)

        def drain() -> None:
            with console_board.client() as s, s.subscribe("orders.eu", credit=50) as sub:
                for d in sub:
                    sub.ack(d)
                    if stop.is_set():
                        return

        threads = [threading.Thread(target=feed), threading.Thread(target=drain)]
        for t in threads:
            t.start()
        try:
            # when I watch the overview, I see messages go out, not 0.0.
            browser.get(console_board.url + "/")
            wait_for(
                browser,
                lambda d: float(cell(d, "orders.eu", "out") or 0) > 0,
                message="out /s above 0 for a queue drained by Subscribe",
            )
        finally:
            stop.set()
            c.post("orders.eu", ("last",))  # wakes the consumer to see stop
            for t in threads:
                t.join(30)


def _dead_letters(c: Client, n: int) -> None:
    """``n`` messages of jobs dead-lettered into jobs.dlq (max-deliveries:
    leased, then given back); jobs then filled up to its max_unprocessed."""
    c.create_queue("jobs.dlq")
    c.create_queue("jobs", dead_letter="jobs.dlq", max_deliveries=1, max_unprocessed=n)
    for i in range(n):
        c.post("jobs", ("job", i))
    c.ack("jobs", c.take_leased("jobs", lease=60, max=n), nack=True)
    deadline = time.monotonic() + 30
    while len(c.browse("jobs.dlq").messages) < n:
        assert time.monotonic() < deadline, "not dead-lettered"
        time.sleep(0.1)
    for i in range(n):
        c.post("jobs", ("full", i))


def test_a_failed_bulk_action_keeps_the_list(console_board: ConsoleBoard, browser: Any) -> None:
    # Given ten dead letters whose origin is full,
    with console_board.client() as c:
        _dead_letters(c, 10)
        browser.get(console_board.url + "/deadletters/jobs.dlq")
        wait_for(browser, lambda d: len(rows(d)) == 10, message="ten dead letters")
        # when I resubmit all of them, the board refuses (no room for them),
        click(browser, "#resubmit-matching")
        error = wait_for(browser, lambda d: d.find_elements(By.ID, "error"))[0].text
        # and I see why above the list, which still shows the ten.
        assert "jobs" in error and "full" in error
        assert len(rows(browser)) == 10
        assert "No dead letter" not in browser.find_element(By.ID, "letters").text
        assert len(c.browse("jobs.dlq", section="unprocessed").messages) == 10


def rows(driver: Any) -> list[Any]:
    return list(driver.find_elements(By.CSS_SELECTOR, "#letters tr[data-seq]"))


def test_kick_and_release_ask_first(console_board: ConsoleBoard, browser: Any) -> None:
    # Given a consumer and a leased message on the Consumers page,
    with console_board.client() as c:
        c.create_queue("jobs")
        c.post("jobs", ("job", 1))
        c.post("jobs", ("job", 2))
        with c.subscribe("jobs", credit=1) as sub:
            next(iter(sub))
            [leased] = c.take_leased("jobs", lease=300)
            [v] = c.list_consumers("jobs")
            browser.get(console_board.url + "/consumers")
            kick = f'tr[id="{v.id}"] button.kick'
            wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, kick), message="kick")
            wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#leases .release"))
            # when I press kick, I am asked first, naming the consumer; said
            # no, nothing happens.
            press(browser, kick)
            alert = wait_for(browser, lambda d: d.switch_to.alert, message="a question")
            assert v.id in alert.text and "go back to the queue" in alert.text
            alert.dismiss()
            # The same for release, naming the message.
            press(browser, "#leases button.release")
            alert = wait_for(browser, lambda d: d.switch_to.alert, message="a question")
            assert f"jobs #{leased.message.seq}" in alert.text
            alert.dismiss()
            time.sleep(1)  # (what a sent request would have done by now)
            assert [x.id for x in c.list_consumers("jobs")] == [v.id]
            assert [x.seq for x in c.list_leases("jobs")] == [leased.message.seq]


def test_a_reader_sees_what_she_may_use(users_board: ConsoleBoard, browser: Any) -> None:
    # Given a reader of jobs* (no write, no manage), dead letters of jobs
    # and of a queue outside her grant,
    with users_board.client() as c:
        _dead_letters(c, 2)
        c.create_queue("secret", dead_letter="jobs.dlq")
    sign_in(browser, users_board, READER)
    # her dead letters name no queue she may not see, and have no checkbox;
    browser.get(users_board.url + "/deadletters/jobs.dlq")
    wait_for(browser, lambda d: len(rows(d)) == 2, message="two dead letters")
    senders = browser.find_element(By.CSS_SELECTOR, "#dlqs tbody td:nth-child(3)").text
    assert "jobs" in senders and "secret" not in senders
    assert "1 queue you may not see" in senders
    assert not browser.find_elements(By.CSS_SELECTOR, "#letters input[type=checkbox]")
    # Compose shows her no Post (she may write nowhere), only read and take;
    browser.get(users_board.url + "/compose?queue=jobs")
    wait_for(browser, lambda d: d.find_elements(By.ID, "read"))
    assert not [e for e in browser.find_elements(By.ID, "post") if e.is_displayed()]
    assert browser.find_element(By.ID, "no-post").is_displayed()
    # and a page she may not open is the console's page, its navigation
    # and the reason, with status 403.
    browser.get(users_board.url + "/browse/secret")
    error = wait_for(browser, lambda d: d.find_elements(By.ID, "error"))[0].text
    assert "may not read queue 'secret'" in error
    assert browser.find_elements(By.CSS_SELECTOR, "header.bar nav a")
    assert browser.find_element(By.ID, "me").text == READER.name
