"""The console in a real browser, against a real board.

Given a board served with ``--metrics-listen`` (its console beside
``/metrics``) and headless Chromium driven by Selenium (``tests/browser.py``):
a person signs in with their token; sees a queue's depth change as posts
arrive over gRPC; cannot POST without the session's CSRF token; without
``manage`` sees no delete button and gets 403 for a forged request (the
queue still there over gRPC); and a ``<script>`` in a message's header,
body or tuple shows as text and never runs.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from msgboard.client import Client
from msgboard.engine.events import CONSOLE_ACTION, SYS
from msgboard.errors import QueueNotFound
from msgboard.message import Message
from tests.browser import (
    ADMIN,
    OPERATOR,
    READER,
    ConsoleBoard,
    browser,
    click,
    console_board,
    shoot,
    sign_in,
    users_board,
    wait_for,
)
from tests.served import Served

__all__ = ["browser", "console_board", "users_board"]  # fixtures, used by name
TOKEN = "cluster-secret"


def cell(driver: Any, queue: str, column: str) -> str:
    """A cell of the overview's table, read in one go (htmx may swap the
    rows between a find and a read)."""
    text = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';",
        f'tr[data-queue="{queue}"] td.{column}',
    )
    return str(text).strip()


def post_js(driver: Any, path: str, headers: dict[str, str] | None = None) -> int:
    """A POST made by the page's own script (same origin, the session's
    cookie sent): its status."""
    status: int = driver.execute_async_script(
        """
        const [path, headers, done] = arguments;
        fetch(path, {method: "POST", headers: headers, credentials: "same-origin"})
          .then(r => done(r.status), e => done(-1));
        """,
        path,
        headers or {},
    )
    return status


def await_event(c: Client, event: tuple[object, ...]) -> None:
    """Waits until ``$sys`` holds ``event`` (events are posted in the group
    after the one that caused them)."""
    deadline = time.monotonic() + 30
    while event not in [m.tuple for m in c.browse(SYS, limit=1000).messages]:
        assert time.monotonic() < deadline, f"no {event} on $sys"
        time.sleep(0.1)


def csrf_of(driver: Any) -> str:
    raw = driver.find_element(By.TAG_NAME, "body").get_attribute("hx-headers")
    found = re.search(r'"X-CSRF-Token": "([^"]+)"', raw or "")
    assert found, raw
    return found.group(1)


def test_sign_in_with_a_token(users_board: ConsoleBoard, browser: Any) -> None:
    # Given a board with users, when I open the console I am sent to sign in.
    browser.get(users_board.url + "/")
    wait_for(browser, lambda d: d.current_url.endswith("/signin?next=/"))
    shoot(browser, "signin")
    # A wrong token is refused, with the same words whatever was wrong.
    browser.find_element(By.ID, "token").send_keys("not-a-token")
    browser.find_element(By.ID, "signin").click()
    error = wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".error"))
    assert "not one this board knows" in error[0].text
    assert not browser.find_elements(By.ID, "me")
    # The right one opens a session: the overview, my name, the cookie.
    sign_in(browser, users_board, OPERATOR)
    assert browser.find_element(By.ID, "me").text == OPERATOR.name
    cookie = browser.get_cookie("msgboard_session")
    assert cookie is not None
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/" and "expiry" in cookie
    assert browser.execute_script("return document.cookie") == ""  # no script reads it
    # A session that ends (here: its cookie gone, as when it expires) sends
    # the open page back to sign in at its next refresh.
    browser.get(users_board.url + "/")
    wait_for(browser, lambda d: d.find_elements(By.ID, "me"))
    browser.delete_cookie("msgboard_session")
    wait_for(browser, lambda d: "/signin" in d.current_url, message="back to sign-in")
    sign_in(browser, users_board, OPERATOR)
    # Signing out ends the session: back to the sign-in page.
    browser.find_element(By.CSS_SELECTOR, ".who button").click()
    wait_for(browser, lambda d: "/signin" in d.current_url)
    browser.get(users_board.url + "/events")
    wait_for(browser, lambda d: "/signin?next=/events" in d.current_url)


def test_depth_follows_posts_over_grpc(console_board: ConsoleBoard, browser: Any) -> None:
    # Given the open board (no sign-in) and its overview open,
    browser.get(console_board.url + "/")
    wait_for(browser, lambda d: d.find_elements(By.ID, "queue-rows"))
    assert not browser.find_elements(By.ID, "token")
    with console_board.client() as c:
        # when a queue is made and three messages are posted over gRPC,
        c.create_queue("jobs")
        for i in range(3):
            c.post("jobs", ("job", i))
        # I see its depth reach 3 without reloading the page,
        wait_for(browser, lambda d: cell(d, "jobs", "ready") == "3", message="depth 3")
        # and follow it as two more arrive and one is taken.
        c.post("jobs", ("job", 3))
        c.post("jobs", ("job", 4))
        wait_for(browser, lambda d: cell(d, "jobs", "ready") == "5", message="depth 5")
        c.take("jobs", timeout=0)
        wait_for(browser, lambda d: cell(d, "jobs", "ready") == "4", message="depth 4")
    # Its chart is drawn from the sampler's readings, and grows with the
    # next ones (fetched after the last it has).
    wait_for(
        browser,
        lambda d: (
            "jobs" in (d.find_element(By.ID, "charts").text or "")
            and d.find_elements(By.CSS_SELECTOR, "figure.busiest canvas")
        ),
        message="jobs in the chart's legend",
    )

    def readings(d: Any) -> float:
        return float(d.find_element(By.ID, "charts").get_attribute("data-readings") or 0)

    first = readings(browser)
    wait_for(browser, lambda d: readings(d) > first, message="a later reading drawn")
    shoot(browser, "overview")


def test_a_post_without_the_csrf_token_is_refused(users_board: ConsoleBoard, browser: Any) -> None:
    with users_board.client(ADMIN) as c:
        c.create_queue("jobs-a")
    sign_in(browser, users_board, OPERATOR)
    # A POST from the page itself, with the session's cookie but no token:
    assert post_js(browser, "/queues/jobs-a/delete") == 403
    assert post_js(browser, "/queues/jobs-a/delete", {"X-CSRF-Token": "forged"}) == 403
    with users_board.client(ADMIN) as c:
        assert c.get_queue("jobs-a").spec.name == "jobs-a"  # nothing happened
    # The same POST with the session's token goes through.
    assert post_js(browser, "/queues/jobs-a/delete", {"X-CSRF-Token": csrf_of(browser)}) == 200
    with users_board.client(ADMIN) as c, pytest.raises(QueueNotFound):
        c.get_queue("jobs-a")
    # Sign-out is a POST too: without the token it does nothing.
    assert post_js(browser, "/signout") == 403
    browser.refresh()
    assert browser.find_element(By.ID, "me").text == OPERATOR.name


def test_no_manage_no_button_and_a_forged_request_is_403(
    users_board: ConsoleBoard, browser: Any
) -> None:
    with users_board.client(ADMIN) as c:
        c.create_queue("jobs-b")
    # Rita may read jobs*, not manage them: she sees the queue, no delete.
    sign_in(browser, users_board, READER)
    wait_for(browser, lambda d: cell(d, "jobs-b", "ready") == "0", message="jobs-b shown")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="jobs-b"]')
    assert row.find_elements(By.CSS_SELECTOR, "button.peek")
    assert not row.find_elements(By.CSS_SELECTOR, "button.delete")
    # A request forged with her valid session and CSRF token is still 403,
    assert post_js(browser, "/queues/jobs-b/delete", {"X-CSRF-Token": csrf_of(browser)}) == 403
    with users_board.client(ADMIN) as c:
        assert c.get_queue("jobs-b").spec.name == "jobs-b"
        # and the board says who was refused, as for a gRPC call.
        await_event(c, ("user.denied", READER.name, "console: manage on queue 'jobs-b'"))
    # Olga manages jobs*: she sees the button and deletes the queue with it.
    browser.delete_all_cookies()
    sign_in(browser, users_board, OPERATOR)
    # A real click (hx-confirm opens a dialog the click must not wait on),
    # tried again if htmx replaced the row meanwhile.
    delete = 'tr[data-queue="jobs-b"] button.delete'
    wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, delete).click() or True)
    wait_for(browser, lambda d: d.switch_to.alert).accept()  # hx-confirm
    wait_for(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, 'tr[data-queue="jobs-b"]'))
    with users_board.client(ADMIN) as c:
        with pytest.raises(QueueNotFound):
            c.get_queue("jobs-b")
        await_event(c, (CONSOLE_ACTION, OPERATOR.name, "delete queue", "jobs-b"))


SCRIPT = "<script>window.pwned = 1</script>"
IMG = '<img src=x onerror="window.pwned = 2">'


def test_a_script_in_a_message_stays_text(console_board: ConsoleBoard, browser: Any) -> None:
    with console_board.client() as c:
        c.create_queue("inbox")
        c.post_receipts(
            "inbox",
            [
                Message(
                    tuple=(SCRIPT, 1, 1.0, None, b"\x00<"),
                    address="a.b",
                    headers={"x-evil": SCRIPT, IMG: "name"},
                    content_type="text/html",
                    body=(SCRIPT + IMG).encode(),
                )
            ],
        )
    browser.get(console_board.url + "/")
    wait_for(browser, lambda d: cell(d, "inbox", "ready") == "1", message="inbox shown")
    click(browser, 'tr[data-queue="inbox"] button.peek')
    body = wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#peek pre.body-text"))
    # What was sent shows, character for character, as text:
    assert body[0].text == SCRIPT + IMG
    values = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#peek td.header-value")]
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#peek td.header-name")]
    assert SCRIPT in values and IMG in names
    types = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#peek td.type")]
    assert types == ["str", "int", "float", "null", "bytes"]
    shoot(browser, "peek")
    # and nothing of it became markup or ran.
    assert not browser.find_elements(By.CSS_SELECTOR, "#peek script, #peek img")
    assert browser.execute_script("return window.pwned === undefined")


def test_events_arrive_live(console_board: ConsoleBoard, browser: Any) -> None:
    # Given the Events page open,
    browser.get(console_board.url + "/events")
    wait_for(browser, lambda d: d.find_elements(By.ID, "events"))

    def names(d: Any) -> list[str]:
        return [e.text for e in d.find_elements(By.CSS_SELECTOR, "#events td.event")]

    # the board's start is there, and what happens over gRPC arrives live.
    wait_for(browser, lambda d: "board.started" in names(d), message="board.started")
    with console_board.client() as c:
        c.create_queue("live")
    wait_for(browser, lambda d: "queue.created" in names(d), message="queue.created live")
    rows = browser.find_elements(By.CSS_SELECTOR, "#events tr")
    assert "live" in rows[0].text  # the newest first (issue 35)
    shoot(browser, "events")


def test_the_cluster_page_of_a_board_alone(console_board: ConsoleBoard, browser: Any) -> None:
    browser.get(console_board.url + "/cluster")
    role = wait_for(browser, lambda d: d.find_elements(By.ID, "role"))
    assert "does not replicate" in role[0].text
    assert browser.find_element(By.ID, "links").text == "No links."


def test_the_cluster_page_shows_the_standbys_lag(tmp_path: Path, browser: Any) -> None:
    """Given a primary (replication token, writes answered alone after
    0.3 s) with its console, and a standby following it, I expect the
    primary's Cluster page to name it primary and list the standby, caught
    up (lag 0 entries) after a post."""
    (tmp_path / "p").mkdir()
    (tmp_path / "s").mkdir()
    primary = ConsoleBoard(
        tmp_path / "p", (), "--replication-token", TOKEN, "--allow-async",
        "--sync-timeout-ms", "300",
    )  # fmt: skip
    standby = Served(tmp_path / "s", "--replication-token", TOKEN, "--standby-of", primary.address)
    try:
        with primary.client() as c:
            c.create_queue("replicated")
            c.post("replicated", ("x",))
        browser.get(primary.url + "/cluster")
        wait_for(browser, lambda d: "primary" in d.find_element(By.ID, "role").text)

        def standbys(d: Any) -> list[list[str]]:
            rows = d.find_elements(By.CSS_SELECTOR, "table.standbys tbody tr")
            return [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]

        wait_for(
            browser,
            lambda d: any(len(r) == 4 and r[2] == "0" for r in standbys(d)),
            message="a standby caught up",
        )
        shoot(browser, "cluster")
    finally:
        standby.stop()
        primary.stop()
