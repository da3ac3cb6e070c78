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

from tests.browser import (
    ConsoleBoard,
    browser,
    console_board,
    users_board,
    wait_for,
)
from tests.test_console import cell

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
