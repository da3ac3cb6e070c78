"""The console as issue 35's user met it, in a real browser.

Given a board served with its console and headless Chromium (``browser.py``):
the overview's out /s counts a queue drained by a Subscribe consumer; a
failed bulk action on Dead letters keeps the list and shows the error above
it; kick and release ask first; a forbidden page is the console's own page
with the reason, and a reader sees no Post button, checkbox or queue name
she may not use.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from msgboard import definitions as defs
from msgboard.client import Client
from msgboard.spec import QueueSpec
from tests.browser import (
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
from tests.test_console import await_event, cell
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
    shoot(browser, "forbidden")


def names_shown(driver: Any) -> list[str] | None:
    got = driver.execute_script(
        "return [...document.querySelectorAll('#queue-rows tr[data-queue]')]"
        ".map(r => r.dataset.queue)"
    )
    return list(got) if got is not None else None


def test_a_queue_list_to_work_with_and_a_queue_page(
    console_board: ConsoleBoard, browser: Any
) -> None:
    # Given a dozen queues, orders.eu the deepest, fed by a selector from
    # orders and read by a consumer holding one message,
    with console_board.client() as c:
        for name in ("orders", "orders.eu", "orders.us", *(f"misc.{i}" for i in range(9))):
            c.create_queue(name)
        c.create_selector("orders", op="move", to="orders.eu", templates=[("eu", int)])
        for i in range(5):
            c.post("orders", ("eu", i))
        c.post("orders.us", ("us", 1))
        with c.subscribe("orders.eu", credit=1) as sub:
            first = next(iter(sub))
            # the list filters by a part of the name, and keeps the filter
            # as it refreshes;
            browser.get(console_board.url + "/")
            wait_for(browser, lambda d: len(names_shown(d) or []) == 12, message="12 rows")
            browser.find_element(By.ID, "filter-q").send_keys("orders")
            click(browser, "#filter-go")
            want = ["orders", "orders.eu", "orders.us"]
            wait_for(browser, lambda d: names_shown(d) == want, message="filtered")
            # it sorts by a column, the deepest first (a second click: the
            # other way);
            click(browser, 'th[data-sort="ready"] a')
            wait_for(browser, lambda d: "sort=ready" in d.current_url)
            wait_for(browser, lambda d: (names_shown(d) or [""])[0] == "orders.eu")
            assert "desc=1" in browser.current_url and "q=orders" in browser.current_url
            # peek shows the oldest waiting message, not the newest;
            click(browser, 'tr[data-queue="orders.eu"] button.peek')
            peek = wait_for(browser, lambda d: d.find_element(By.ID, "peek").text)
            assert "Oldest waiting" in peek and '"eu", 0' in peek.replace("[", " ")
            # a name opens the queue's page: figures, consumer with its lag,
            # the selector into it, the last messages;
            click(browser, 'tr[data-queue="orders.eu"] td.name a')
            wait_for(browser, lambda d: d.find_elements(By.ID, "queue-name"))
            assert browser.find_element(By.ID, "queue-name").text == "orders.eu"
            assert browser.find_element(By.CSS_SELECTOR, "#figures td.ready").text == "4"
            lag = browser.find_element(By.CSS_SELECTOR, "#queue-consumers td.lag").text
            assert lag == "1"
            into = browser.find_element(By.CSS_SELECTOR, "#selectors tr.in").text
            assert "orders" in into and "move" in into and '"eu"' in into
            seqs = [
                int(e.get_attribute("data-seq"))
                for e in browser.find_elements(By.CSS_SELECTOR, "#last tr[data-seq]")
            ]
            assert seqs == [5, 4, 3, 2, 1]
            shoot(browser, "queue")
            # and Browse opens on the queue I came from.
            click(browser, 'header.bar nav a[href="/browse"]')
            wait_for(browser, lambda d: d.current_url.endswith("/browse/orders.eu"))
            sub.ack(first)
    # The overview has one chart, of the busiest queues, with a legend
    # (once the sampler has read orders.eu's depth).
    browser.get(console_board.url + "/")
    wait_for(
        browser,
        lambda d: "orders.eu" in d.find_element(By.ID, "charts").text,
        message="orders.eu in the busiest queues' chart",
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#charts canvas")) == 1


def test_events_named_filtered_newest_first(console_board: ConsoleBoard, browser: Any) -> None:
    # Given a board where queues come and go,
    with console_board.client() as c:
        c.create_queue("a.one")
        c.create_queue("b.two")
        c.delete_queue("a.one")
        await_event(c, ("queue.deleted", "a.one"))
        browser.get(console_board.url + "/events")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#events tr"))
        # the newest is first, and its fields are named;
        first = browser.find_element(By.CSS_SELECTOR, "#events tr")
        assert first.find_element(By.CSS_SELECTOR, "td.event").text == "queue.deleted"
        assert first.find_element(By.CSS_SELECTOR, "td.fields").text == "queue a.one"
        # filtered by kind and queue, only those events show, and new ones
        # arrive at the top, filtered too.
        Select(browser.find_element(By.ID, "kind")).select_by_value("queue")
        browser.find_element(By.ID, "event-queue").send_keys("a.one")
        click(browser, "#events-go")
        wait_for(browser, lambda d: "kind=queue" in d.current_url)
        assert event_names(browser) == ["queue.deleted", "queue.created"]
        c.create_queue("b.three")
        c.create_queue("a.one")
        want = ["queue.created", "queue.deleted", "queue.created"]
        wait_for(browser, lambda d: event_names(d) == want, message="a.one live, on top")
        top = browser.find_element(By.CSS_SELECTOR, "#events tr td.fields").text
        assert top == "queue a.one kind durable"
        shoot(browser, "events-filtered")


def event_names(driver: Any) -> list[str]:
    return [str(e.text) for e in driver.find_elements(By.CSS_SELECTOR, "#events td.event")]


def test_create_a_queue_and_a_selector_and_import_definitions(
    console_board: ConsoleBoard, browser: Any, tmp_path: Path
) -> None:
    # Given the Definitions page of the open board,
    browser.get(console_board.url + "/definitions")
    # when I create a queue and a selector into it,
    browser.find_element(By.ID, "queue-name-input").send_keys("made.here")
    browser.find_element(By.NAME, "max_unprocessed").send_keys("5")
    click(browser, "#create-queue")
    wait_for(browser, lambda d: "Created queue made.here" in d.find_element(By.ID, "done").text)
    browser.find_element(By.ID, "queue-name-input").send_keys("made.in")
    click(browser, "#create-queue")
    wait_for(browser, lambda d: "made.in" in d.find_element(By.ID, "done").text)
    browser.find_element(By.ID, "selector-source").send_keys("made.in")
    browser.find_element(By.ID, "selector-destination").send_keys("made.here")
    browser.find_element(By.NAME, "template").send_keys('["job", "?int"]')
    click(browser, "#create-selector")
    wait_for(browser, lambda d: "Created selector" in d.find_element(By.ID, "done").text)
    with console_board.client() as c:
        [q] = [v for v in c.list_queues() if v.spec.name == "made.here"]
        assert q.spec.max_unprocessed == 5
        [s] = c.list_selectors("made.in")
        assert s.spec.destination == "made.here"
        # a bad one says why and keeps what I typed;
        browser.find_element(By.ID, "selector-source").send_keys("nope")
        click(browser, "#create-selector")
        error = wait_for(browser, lambda d: d.find_elements(By.ID, "error"))[0].text
        assert "nope" in error
        assert browser.find_element(By.ID, "selector-source").get_attribute("value") == "nope"
        # the export is the board's definitions file,
        text = browser.execute_async_script(
            "const done = arguments[0];"
            "fetch('/definitions.json', {credentials: 'same-origin'})"
            ".then(r => r.text()).then(done, () => done(''));"
        )
        body = json.loads(text)
        assert [x["name"] for x in body["queues"]] == ["made.here", "made.in"]
        # and importing a file creates what it holds.
        other = defs.Definitions([QueueSpec("imported.a"), QueueSpec("imported.b")])
        path = tmp_path / "defs.json"
        path.write_text(defs.dumps(other))
        browser.get(console_board.url + "/definitions")
        browser.find_element(By.ID, "import-file").send_keys(str(path))
        click(browser, "#import")
        done = wait_for(browser, lambda d: d.find_elements(By.ID, "done"))[0].text
        assert "created 2 queue(s)" in done
        shoot(browser, "definitions")
        assert {"imported.a", "imported.b"} <= {v.spec.name for v in c.list_queues()}


def test_saved_filters_for_browse_and_dead_letters(
    console_board: ConsoleBoard, browser: Any
) -> None:
    # Given dead letters of jobs,
    with console_board.client() as c:
        _dead_letters(c, 2)
    # when I save a pattern by name on Browse,
    browser.get(console_board.url + "/browse/jobs")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".saved-save"))
    browser.find_element(By.NAME, "template").send_keys('["job", "?int"]')
    browser.find_element(By.NAME, "filter").send_keys("priority >= 0")
    browser.find_element(By.CSS_SELECTOR, ".saved-name").send_keys("jobs by number")
    click(browser, ".saved-save")
    # it is there on Dead letters (another page, the same browser), and
    # choosing it fills the form with what I saved;
    browser.get(console_board.url + "/deadletters/jobs.dlq")
    pick = wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".saved-pick"))[0]
    Select(pick).select_by_visible_text("jobs by number")
    assert browser.find_element(By.NAME, "template").get_attribute("value") == '["job", "?int"]'
    assert browser.find_element(By.NAME, "filter").get_attribute("value") == "priority >= 0"
    click(browser, "#filter-go")
    wait_for(browser, lambda d: "template=" in d.current_url and len(rows(d)) == 2)
    # and forgetting it removes it.
    Select(browser.find_element(By.CSS_SELECTOR, ".saved-pick")).select_by_visible_text(
        "jobs by number"
    )
    click(browser, ".saved-forget")
    browser.get(console_board.url + "/browse/jobs")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".saved-pick"))
    options = browser.find_elements(By.CSS_SELECTOR, ".saved-pick option")
    assert [o.text for o in options] == ["(choose one)"]
