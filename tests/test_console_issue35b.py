"""The rest of issue 35's console items, in a real browser.

Given a board served with its console and headless Chromium (``browser.py``):
the queue page gives each consumer's lag as its outstanding deliveries and
the age of the oldest one it has not acked.
"""

from __future__ import annotations

import re
import time
from typing import Any

from selenium.webdriver.common.by import By

from msgboard.client import Client
from msgboard.console.messages import age
from msgboard.testing import ServerThread
from tests.browser import ConsoleBoard, browser, click, console_board, wait_for

__all__ = ["browser", "console_board"]  # fixtures, used by name


def _lag(driver: Any) -> tuple[str, str, float]:
    """The queue page's one consumer: outstanding, the age as shown, and
    the age in seconds."""
    cell = driver.find_element(By.CSS_SELECTOR, "#queue-consumers td.age")
    lag = driver.find_element(By.CSS_SELECTOR, "#queue-consumers td.lag").text
    return lag, cell.text, float(cell.get_attribute("data-seconds"))


def test_a_consumers_lag_gives_the_age_of_its_oldest_unacked_delivery(
    console_board: ConsoleBoard, browser: Any
) -> None:
    # Given a consumer with nothing out, its page says so;
    with console_board.client() as c:
        c.create_queue("jobs")
        with c.subscribe("jobs", credit=2) as sub:
            browser.get(console_board.url + "/queues/jobs")
            lag, shown, _ = wait_for(browser, _lag)
            assert (lag, shown) == ("0", "none out")
            # when it is handed one message, then, seconds later, another,
            # and acks neither,
            c.post("jobs", ("job", 1))
            deliveries = iter(sub)
            first = next(deliveries)
            got_first = time.time()
            time.sleep(3)
            posted_second = time.time()
            c.post("jobs", ("job", 2))
            next(deliveries)
            # its lag is two outstanding, the oldest out since the first was
            # handed out (in seconds, as a person reads them),
            before = time.time()
            browser.get(console_board.url + "/queues/jobs")
            lag, shown, seconds = wait_for(browser, _lag)
            assert lag == "2"
            assert seconds >= before - got_first - 0.1
            assert re.fullmatch(r"\d+(\.\d)? s", shown), shown
            # and once the first is acked, the oldest is the second: its age
            # is counted from the second's delivery, not the first's.
            sub.ack(first)

            def acked(d: Any) -> tuple[str, str, float] | None:
                d.get(console_board.url + "/queues/jobs")
                got = _lag(d)
                return got if got[0] == "1" else None

            lag, shown, seconds = wait_for(browser, acked, message="one outstanding")
            after = time.time()
            assert seconds <= after - posted_second + 0.1
            assert seconds < after - got_first - 2


def test_age_reads_in_the_two_largest_units() -> None:
    assert age(0.42) == "0.4 s"
    assert age(42) == "42 s"
    assert age(245) == "4 min 05 s"
    assert age(7620) == "2 h 07 min"
    assert age(3 * 86400 + 4 * 3600 + 5) == "3 d 04 h"
    assert age(-3) == "0.0 s"


def test_the_oldest_unacked_delivery_outlives_hundreds_of_acked_groups(
    server: ServerThread,
) -> None:
    # Given a consumer holding its first delivery unacked,
    c = Client(server.address)
    c.create_queue("jobs")
    c.post("jobs", ("job", 0))
    board = server.board

    def oldest() -> int:
        [v] = board.list_consumers_async("jobs").result(30)
        return v.oldest

    with c.subscribe("jobs", credit=10) as sub:
        deliveries = iter(sub)
        first = next(deliveries)
        then = oldest()
        assert then > 0
        # when it is handed 300 more, one group each, and acks them,
        for i in range(300):
            c.post("jobs", ("job", i + 1))
            sub.ack(next(deliveries))
        # the oldest unacked is still the first (the groups' times kept for
        # it were not dropped with those of the acked ones),
        assert oldest() == then
        # and once it is acked too, the oldest is a later one's.
        sub.ack(first)
        deadline = time.monotonic() + 30
        while oldest() == then:
            assert time.monotonic() < deadline, "the first's ack was not applied"
            c.post("jobs", ("more",))
            sub.ack(next(deliveries))
        assert oldest() > then


def _many_dead_letters(c: Client, n: int, room: int) -> None:
    """``n`` dead letters of jobs on jobs.dlq (posted in one stream, leased
    and given back: max-deliveries), jobs then filled up to leave
    ``room`` for resubmits."""
    c.create_queue("jobs.dlq")
    c.create_queue("jobs", dead_letter="jobs.dlq", max_deliveries=1, max_unprocessed=n)
    c.post_many("jobs", [("job", i) for i in range(n)])
    while leased := c.take_leased("jobs", lease=60, max=n):  # a Take gives 2,000 at most
        c.ack("jobs", leased, nack=True)
    deadline = time.monotonic() + 60
    while c.get_queue("jobs.dlq").unprocessed < n:
        assert time.monotonic() < deadline, "not dead-lettered"
        time.sleep(0.1)
    c.post_many("jobs", [("full", i) for i in range(n - room)])


def _watch_bulk(driver: Any) -> list[tuple[int, int]]:
    """Reads the page until the action ends (its outcome shown): each
    (done, total) its progress showed on the way."""
    seen: list[tuple[int, int]] = []

    def ended(d: Any) -> bool:
        got = d.execute_script(
            "const p = document.getElementById('progress-done'),"
            " t = document.getElementById('progress-total');"
            "return [p && p.textContent, t && t.textContent,"
            " !!(document.getElementById('done') || document.getElementById('error'))]"
        )
        if got[0] is not None and got[1] is not None:
            reading = (int(got[0].replace(",", "")), int(got[1].replace(",", "")))
            if reading not in seen:
                seen.append(reading)
        return bool(got[2])

    wait_for(driver, ended, message="the bulk action's outcome")
    return seen


def test_a_bulk_action_over_thousands_shows_progress_then_the_list_as_it_is(
    console_board: ConsoleBoard, browser: Any
) -> None:
    # Given 6,000 dead letters whose origin has room for 4,700,
    with console_board.client() as c:
        _many_dead_letters(c, 6000, room=4700)
        browser.get(console_board.url + "/deadletters/jobs.dlq")
        wait_for(browser, lambda d: len(_letters(d)) == 100, message="a page of dead letters")
        # when I resubmit all of them, the page answers at once and shows
        # how far it is (done of 6,000) as it goes, in batches of 500,
        click(browser, "#resubmit-matching")
        seen = _watch_bulk(browser)
        assert seen, "no progress shown"
        assert all(total == 6000 and d % 500 == 0 and d < 6000 for d, total in seen), seen
        # until a batch finds no room: it stops there, says how many went
        # and why it stopped, above the list as it is (1,500 still there).
        done = browser.find_element(By.ID, "done").text
        error = browser.find_element(By.ID, "error").text
        assert done == "Resubmitted 4,500 of 6,000 messages to jobs in 9 batches, then stopped."
        assert "jobs" in error and "full" in error
        assert len(_letters(browser)) == 100
        assert c.get_queue("jobs.dlq").unprocessed == 1500
        assert c.get_queue("jobs").unprocessed == 1300 + 4500
        # Deleting the 1,500 left goes the same way, to the end.
        browser.find_element(By.ID, "delete-sure").click()
        click(browser, "#delete-matching")
        seen = _watch_bulk(browser)
        assert all(total == 1500 and d % 500 == 0 and d < 1500 for d, total in seen), seen
        assert browser.find_element(By.ID, "done").text == "Deleted 1,500 messages."
        assert not browser.find_elements(By.ID, "error")
        assert c.get_queue("jobs.dlq").unprocessed == 0


def _letters(driver: Any) -> list[Any]:
    return list(driver.find_elements(By.CSS_SELECTOR, "#letters tr[data-seq]"))


def test_a_consumer_keeps_one_time_per_group_with_a_delivery_out() -> None:
    """The engine's record behind the age (``Consumer.handed``): as the
    network keeps it (``_first_out``: an entry a group, ``prune`` once the
    entries pass twice the deliveries out), 1,000 groups acked around one
    delivery held since the first leave a few entries, not 1,000, and the
    oldest is the first's time; then the second's once the first is acked."""
    from msgboard.engine.selectors import Consumer, Selector
    from msgboard.message import Message
    from msgboard.spec import SelectorSpec

    c = Consumer(Selector("s", SelectorSpec("q"), False, True), 10.0, print, print)
    m = Message(("job",))
    for did in range(1, 1001):
        c.handed.append((did, did * 1000))  # group ``did`` of one, at did ms
        if len(c.handed) > 2 * len(c.outstanding) + 16:
            c.prune()
        c.outstanding.add(did, m)
        if did - 1 in c.outstanding and did - 1 not in (1, 2, 999):
            del c.outstanding[did - 1]  # acked
    assert set(c.outstanding) == {1, 2, 999, 1000}
    assert len(c.handed) <= 2 * len(c.outstanding) + 17
    assert c.oldest() == 1000
    del c.outstanding[1]
    assert c.oldest() == 2000
    del c.outstanding[2]
    assert c.oldest() == 999_000
