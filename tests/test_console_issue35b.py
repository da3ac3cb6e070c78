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
from tests.browser import ConsoleBoard, browser, console_board, wait_for

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
