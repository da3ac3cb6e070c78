"""The console's working pages in a real browser, against a real board.

Given a board served with its console (``tests/browser.py``: ``msgboard
serve`` with ``--metrics-listen``, headless Chromium through Selenium), a
person browses a queue with a template and opens a message; resubmits dead
letters to their origin (checked over gRPC); kicks a consumer and releases
a leased message; composes a typed message (read back over gRPC with its
types); without ``manage`` sees no purge button and a forged purge is 403;
a ``<script>`` in a body, header or tuple stays text; and the routing
network is drawn with a link through to each queue. With
``MSGBOARD_SCREENSHOTS=1`` the tests save the pages into ``docs/console/``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from msgboard.client import Client
from msgboard.engine.events import CONSOLE_ACTION
from msgboard.errors import Kicked
from tests.browser import (
    OPERATOR,
    READER,
    ConsoleBoard,
    browser,
    console_board,
    shoot,
    sign_in,
    users_board,
    wait_for,
)
from tests.test_console import await_event

__all__ = ["browser", "console_board", "users_board"]  # fixtures, used by name


def by_id(driver: Any, name: str) -> Any:
    return driver.find_element(By.ID, name)


def texts(driver: Any, css: str) -> list[str] | None:
    """The texts of what ``css`` selects; None while the page is replaced."""
    try:
        return [str(e.text) for e in driver.find_elements(By.CSS_SELECTOR, css)]
    except StaleElementReferenceException:
        return None


def seqs_shown(driver: Any, table: str) -> list[int] | None:
    """The seqs of the rows of the table with id ``table``; None while the
    page is being replaced."""
    try:
        rows = driver.find_elements(By.CSS_SELECTOR, f"#{table} tr[data-seq]")
        return [int(r.get_attribute("data-seq")) for r in rows]
    except StaleElementReferenceException:
        return None


def css_text(driver: Any, css: str) -> str | None:
    """The text of the first element ``css`` selects (None while there is
    none, or while the part of the page it was in is being replaced: by a
    navigation, or by the Consumers page's refresh)."""
    try:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        return str(found[0].text) if found else None
    except StaleElementReferenceException:
        return None


def press(driver: Any, css: str) -> None:
    """Clicks what ``css`` selects, once it is there and stays put long
    enough to be clicked."""

    def go(d: Any) -> bool:
        try:
            d.find_element(By.CSS_SELECTOR, css).click()
            return True
        except (StaleElementReferenceException, NoSuchElementException):
            return False

    wait_for(driver, go, message=f"click {css}")


def text_of(driver: Any, name: str) -> str:
    """The text of the element with id ``name`` ("" while there is none, or
    while the page it was on is being replaced)."""
    try:
        found = driver.find_elements(By.ID, name)
        return str(found[0].text) if found else ""
    except StaleElementReferenceException:
        return ""


def wait_text(driver: Any, name: str, expected: str) -> None:
    """Waits until the element with id ``name`` says ``expected``."""
    wait_for(driver, lambda d: text_of(d, name) == expected, message=f"#{name}: {expected}")


def fill(element: Any, text: str) -> None:
    element.clear()
    element.send_keys(text)


def post_form(driver: Any, path: str, form: dict[str, str]) -> tuple[int, str]:
    """A form POST made by the page's own script (same origin, the session's
    cookie sent, the session's CSRF token, read from the page's htmx
    headers, in the form): its status and text."""
    done: list[Any] = driver.execute_async_script(
        """
        const [path, form, done] = arguments;
        const body = new URLSearchParams(form);
        body.set("csrf", JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRF-Token"]);
        fetch(path, {method: "POST", body: body, credentials: "same-origin", redirect: "manual"})
          .then(r => r.text().then(t => done([r.status, t])), e => done([-1, String(e)]));
        """,
        path,
        form,
    )
    return int(done[0]), str(done[1])


# ------------------------------------------------------------------ browse


def test_browse_with_a_template_and_open_a_message(
    console_board: ConsoleBoard, browser: Any
) -> None:
    c = console_board.client()
    c.create_queue("jobs", max_history=100)
    c.post("jobs", ("job", 1), address="eu.fr", body=b"Hello, world!", headers={"h": "v"})
    c.post("jobs", ("job", 2.0), address="eu.de")
    c.post("jobs", ("task", 3), address="us.ny")
    c.take("jobs", [("task", int)])  # seq 3 goes to history

    # Given the browse page of jobs, when I filter with a template written
    # as the CLI takes it, I expect only the message whose second field is
    # an int: 1 (2.0 is a float, 3 does not match "job").
    browser.get(console_board.url + "/browse/jobs")
    wait_for(browser, lambda d: seqs_shown(d, "messages") == [1, 2, 3], message="all three")
    fill(browser.find_element(By.NAME, "template"), '["job", "?int"]')
    by_id(browser, "browse-go").click()
    wait_for(browser, lambda d: seqs_shown(d, "messages") == [1], message="the int one only")
    shoot(browser, "browse")

    # History and waiting are apart; an address pattern and a filter work.
    Select(browser.find_element(By.NAME, "section")).select_by_value("history")
    fill(browser.find_element(By.NAME, "template"), "")
    by_id(browser, "browse-go").click()
    wait_for(browser, lambda d: seqs_shown(d, "messages") == [3], message="history")
    browser.get(console_board.url + "/browse/jobs?address=topic:eu.*&filter=t[1]+%3E+1")
    wait_for(browser, lambda d: seqs_shown(d, "messages") == [2], message="address and filter")

    # Paging: one a page, forward from the oldest and back from the newest.
    for order, first, second in (("oldest", [1], [2]), ("newest", [3], [2])):
        browser.get(console_board.url + f"/browse/jobs?limit=1&order={order}")
        wait_for(browser, lambda d, want=first: seqs_shown(d, "messages") == want)
        press(browser, "#more")
        wait_for(browser, lambda d, want=second: seqs_shown(d, "messages") == want)

    # A bad template says what and where, and keeps what was typed.
    browser.get(console_board.url + "/browse/jobs?template=%5B%22job%22%2C+%22%3Fint")
    error = wait_for(browser, lambda d: d.find_elements(By.ID, "error"))[0].text
    assert "template line 1: not JSON" in error
    assert browser.find_element(By.NAME, "template").get_attribute("value") == '["job", "?int'

    # Opening message 1: its envelope, its typed tuple, its headers, and
    # its body as text, then as hex.
    browser.get(console_board.url + "/browse/jobs/1")
    wait_for(browser, lambda d: d.find_elements(By.ID, "tuple"))
    assert texts(browser, "#tuple td.type") == ["str", "int"]
    assert by_id(browser, "body").text == "Hello, world!"
    assert "eu.fr" in by_id(browser, "message").text
    by_id(browser, "view-hex").click()
    wait_for(browser, lambda d: "48 65 6c 6c 6f" in text_of(d, "body"))
    shoot(browser, "message")
    browser.get(console_board.url + "/browse/jobs/2")
    wait_for(browser, lambda d: texts(d, "#tuple td.value") == ["job", "2.0"])


# ------------------------------------------------------------- dead letters


def _dead_letters(c: Client, n: int) -> None:
    """``n`` messages of jobs dead-lettered into jobs.dlq (max-deliveries:
    leased, then given back)."""
    c.create_queue("jobs.dlq")
    c.create_queue("jobs", dead_letter="jobs.dlq", max_deliveries=1)
    for i in range(n):
        c.post("jobs", ("job", i), body=f"job {i}")
    leased = c.take_leased("jobs", lease=60, max=n)
    c.ack("jobs", leased, nack=True)
    deadline = time.monotonic() + 30
    while len(c.browse("jobs.dlq").messages) < n:
        assert time.monotonic() < deadline, "not dead-lettered"
        time.sleep(0.1)


def test_resubmit_dead_letters_to_their_origin(users_board: ConsoleBoard, browser: Any) -> None:
    c = users_board.client()
    _dead_letters(c, 3)
    sign_in(browser, users_board, OPERATOR)

    # Given three dead letters of jobs, I expect each with its reason and
    # origin; ticking two and resubmitting them, I expect them back on jobs
    # (over gRPC, with whence they came), the third still dead, and a
    # messages.moved event on $sys naming olga.
    browser.get(users_board.url + "/deadletters/jobs.dlq")
    wait_for(browser, lambda d: seqs_shown(d, "letters") == [1, 2, 3], message="dead letters")
    assert set(texts(browser, "#letters td.reason")) == {"max-deliveries"}
    assert texts(browser, "#letters td.origin") == ["jobs #1", "jobs #2", "jobs #3"]
    shoot(browser, "deadletters")
    for seq in (1, 3):
        browser.find_element(By.CSS_SELECTOR, f'input[name=seq][value="{seq}"]').click()
    by_id(browser, "resubmit-selected").click()
    wait_text(browser, "done", "Resubmitted 2 messages to jobs.")
    assert seqs_shown(browser, "letters") == [2]
    back = c.browse("jobs", section="unprocessed").messages
    assert [m.tuple for m in back] == [("job", 0), ("job", 2)]
    assert [m.headers["x-moved-from"] for m in back] == ["jobs.dlq", "jobs.dlq"]
    assert [m.tuple for m in c.browse("jobs.dlq", section="unprocessed").messages] == [("job", 1)]
    await_event(c, ("messages.moved", "jobs.dlq", "jobs", 2, OPERATOR.name))

    # The one left, opened: why and whence, beside its envelope.
    browser.get(users_board.url + "/browse/jobs.dlq/2")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "table.dead-letter"))
    assert texts(browser, "table.dead-letter td") == ["max-deliveries", "jobs #2"]
    browser.get(users_board.url + "/deadletters/jobs.dlq")

    # Deleting all that match a filter takes the last one, and only it.
    c.post("jobs.dlq", ("other",))
    fill(browser.find_element(By.NAME, "template"), '["job", "?int"]')
    by_id(browser, "filter-go").click()
    # (The page before showed [2] too: wait for the filtered page itself.)
    wait_for(browser, lambda d: "template=" in d.current_url and seqs_shown(d, "letters") == [2])
    # Deleting asks for "I mean it": without it the form is not valid, and a
    # browser does not send a form that is not.
    assert not browser.execute_script(
        "return document.getElementById('letters-form').checkValidity()"
    )
    by_id(browser, "delete-sure").click()
    by_id(browser, "delete-matching").click()
    wait_text(browser, "done", "Deleted 1 message.")
    assert [m.tuple for m in c.browse("jobs.dlq", section="unprocessed").messages] == [("other",)]
    await_event(c, ("messages.deleted", "jobs.dlq", 1, OPERATOR.name))

    # Moving to a queue without room refuses the lot and says why.
    c.create_queue("jobs.full", max_unprocessed=1)
    c.post("jobs.full", ("full",))
    browser.get(users_board.url + "/deadletters/jobs.dlq")
    Select(by_id(browser, "destination")).select_by_value("jobs.full")
    by_id(browser, "move-matching").click()
    error = wait_for(browser, lambda d: d.find_elements(By.ID, "error"))[0].text
    assert "jobs.full" in error
    assert len(c.browse("jobs.dlq", section="unprocessed").messages) == 1


# -------------------------------------------------------- consumers, leases


def test_kick_a_consumer_and_release_a_lease(console_board: ConsoleBoard, browser: Any) -> None:
    c = console_board.client()
    c.create_queue("jobs")
    c.post("jobs", ("job", 1))
    c.post("jobs", ("job", 2))
    with c.subscribe("jobs", credit=1) as sub:
        first = next(iter(sub))
        [leased] = c.take_leased("jobs", lease=300)
        [v] = c.list_consumers("jobs")

        # Given a consumer holding one message and a leased message, I
        # expect both listed with their figures.
        browser.get(console_board.url + "/consumers")
        row = f'tr[id="{v.id}"]'
        wait_for(browser, lambda d: css_text(d, f"{row} td.credit") == "1", message="credit")
        assert css_text(browser, f"{row} td.outstanding") == "1"
        seq = str(leased.message.seq)
        wait_for(browser, lambda d: texts(d, "#leases td.seq") == [seq], message="the lease")
        shoot(browser, "consumers")

        # The tables refresh themselves: a consumer that comes shows up.
        with c.subscribe("jobs", credit=7):
            [late] = [x for x in c.list_consumers("jobs") if x.id != v.id]
            late_row = f'tr[id="{late.id}"] td.credit'
            wait_for(browser, lambda d: css_text(d, late_row) == "7", message="refreshed")

        # Kicked, its stream ends Kicked and its message goes back.
        press(browser, f"{row} button.kick")
        browser.switch_to.alert.accept()  # kicking asks first (issue 35)
        wait_for(browser, lambda d: d.find_elements(By.ID, "done"))
        with pytest.raises(Kicked):
            list(sub)
    assert c.list_consumers() == []
    await_event(c, (CONSOLE_ACTION, "", f"kick consumer {v.id}", "jobs"))
    [back] = c.take("jobs", timeout=10)
    assert back.seq == first.message.seq

    # Released, the leased message waits again and its taker's ack fails.
    press(browser, "#leases button.release")
    browser.switch_to.alert.accept()
    wait_text(browser, "done", f"Released jobs #{leased.message.seq}: waiting again.")
    assert [m.seq for m in c.take("jobs", timeout=10)] == [leased.message.seq]
    assert leased.id in c.ack("jobs", [leased]).rejected
    await_event(c, ("messages.released", "jobs", 1, ""))


# ----------------------------------------------------------------- compose


def _row(driver: Any, i: int, kind: str, text: str) -> None:
    fields = driver.find_elements(By.CSS_SELECTOR, "#fields .field")
    Select(fields[i].find_element(By.NAME, "type")).select_by_value(kind)
    fill(fields[i].find_element(By.NAME, "value"), text)


def test_compose_a_typed_message_and_read_it_back(
    console_board: ConsoleBoard, browser: Any
) -> None:
    c = console_board.client()
    c.create_queue("jobs")
    browser.get(console_board.url + "/compose?queue=jobs")
    wait_for(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#fields .field")) == 3)
    # Two more rows, added by htmx.
    for n in (4, 5):
        by_id(browser, "add-field").click()
        wait_for(
            browser, lambda d, n=n: len(d.find_elements(By.CSS_SELECTOR, "#fields .field")) == n
        )
    for i, (kind, text) in enumerate(
        [("str", "job"), ("int", "1"), ("float", "1"), ("null", ""), ("bytes", "de ad be ef")]
    ):
        _row(browser, i, kind, text)
    fill(by_id(browser, "address"), "eu.fr")
    fill(by_id(browser, "body"), '{"a": [1, 2]}')
    fill(browser.find_element(By.NAME, "content_type"), "application/json")
    fill(browser.find_element(By.NAME, "headers"), "trace: abc")
    shoot(browser, "compose")
    by_id(browser, "post").click()
    posted = wait_for(browser, lambda d: d.find_elements(By.ID, "posted"))[0].text
    assert posted.startswith("Posted to jobs: seq 1 (stored).")

    # Over gRPC: int 1 and float 1.0 stayed apart, null is null, bytes are bytes.
    [m] = c.read("jobs")
    assert m.tuple == ("job", 1, 1.0, None, b"\xde\xad\xbe\xef")
    assert [type(v) for v in m.tuple] == [str, int, float, type(None), bytes]
    assert (m.address, m.headers, m.content_type) == ("eu.fr", {"trace": "abc"}, "application/json")
    assert m.body == b'{"a": [1, 2]}'

    # Read back in the page by a template with formals for every type.
    fill(
        browser.find_element(By.NAME, "match_template"),
        '["job", "?int", "?float", "?null", "?bytes"]',
    )
    by_id(browser, "read").click()
    wait_for(browser, lambda d: d.find_elements(By.ID, "got-tuple"))
    assert texts(browser, "#got-tuple td.type") == ["str", "int", "float", "null", "bytes"]
    assert by_id(browser, "got-body").text == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    browser.execute_script("document.getElementById('got-how').scrollIntoView()")
    shoot(browser, "compose-read")

    # A float template does not match the int field: nothing taken.
    fill(browser.find_element(By.NAME, "match_template"), '["job", "?float", "?", "?", "?"]')
    by_id(browser, "take").click()
    wait_text(browser, "got-how", "Took: no waiting message matches.")
    assert len(c.read("jobs")) == 1

    # A bad field names itself, and nothing is posted.
    _row(browser, 1, "int", "1.5")
    by_id(browser, "post").click()
    wait_text(browser, "error", "tuple[1]: '1.5' is not an int (digits, an optional sign)")
    assert c.get_queue("jobs").unprocessed == 1


# -------------------------------------------------------------- permissions


def test_without_manage_no_purge_button_and_a_forged_purge_is_refused(
    users_board: ConsoleBoard, browser: Any
) -> None:
    c = users_board.client()
    _dead_letters(c, 1)
    c.post("jobs", ("job", 9))
    sign_in(browser, users_board, READER)
    browser.get(users_board.url + "/browse/jobs")
    wait_for(browser, lambda d: seqs_shown(d, "messages"))
    assert browser.find_elements(By.ID, "purge") == []
    browser.get(users_board.url + "/deadletters/jobs.dlq")
    wait_for(browser, lambda d: seqs_shown(d, "letters") == [1])
    assert browser.find_elements(By.ID, "actions") == []
    # Forged: the reader's own session and CSRF token, but no manage (nor
    # write): each refused 403 for that reason, and nothing changed.
    c.create_queue("jobs.work")
    c.post("jobs.work", ("work",))
    with users_board.client(OPERATOR).subscribe("jobs.work", credit=1) as sub:
        next(iter(sub))
        [held] = c.take_leased("jobs.dlq", lease=300)
        [con] = c.list_consumers("jobs.work")
        for path, form, says in [
            ("/browse/jobs/purge", {"sure": "yes"}, "may not manage queue 'jobs'"),
            ("/deadletters/jobs.dlq", {"action": "delete:matching"}, "may not manage"),
            (f"/consumers/{con.id}/kick", {}, "the whole board"),
            ("/leases/release", {"queue": "jobs.dlq", "seq": str(held.message.seq)}, "manage"),
            ("/compose/post", {"queue": "jobs", "type": "int", "value": "1"}, "may not write"),
        ]:
            status, text = post_form(browser, path, form)
            assert (status, says in text) == (403, True), (path, text)
        assert [x.id for x in c.list_consumers("jobs.work")] == [con.id]
        assert [x.seq for x in c.list_leases("jobs.dlq")] == [held.message.seq]
    assert c.get_queue("jobs").unprocessed == 1
    assert c.get_queue("jobs.dlq").unprocessed == 1

    # The operator sees the button, and purging says what it did.
    sign_in(browser, users_board, OPERATOR)
    browser.get(users_board.url + "/browse/jobs")
    by_id(browser, "purge-sure").click()
    by_id(browser, "purge").click()
    wait_text(browser, "done", "Purged 1 waiting message.")
    assert c.get_queue("jobs").unprocessed == 0
    await_event(c, ("queue.purged", "jobs", 1, 0, OPERATOR.name))


def test_a_reader_sees_only_what_they_may_read(users_board: ConsoleBoard, browser: Any) -> None:
    """Given a queue outside the reader's rules, I expect it in no list, not
    drawn, its pages 403, and no consumer's user shown to them."""
    c = users_board.client()
    c.create_queue("jobs")
    c.create_queue("private")
    c.create_selector("jobs", to="private")
    with users_board.client(OPERATOR).subscribe("jobs", credit=2):
        sign_in(browser, users_board, READER)
        browser.get(users_board.url + "/network")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "g.node-consumer"))
        nodes = {
            e.get_attribute("data-node")
            for e in browser.find_elements(By.CSS_SELECTOR, "#network g.node")
        }
        assert "q:jobs" in nodes and "q:private" not in nodes
        assert OPERATOR.name not in by_id(browser, "network").text
        browser.get(users_board.url + "/browse/private")
        assert "may not read" in browser.find_element(By.TAG_NAME, "body").text
        browser.get(users_board.url + "/browse")
        options = [
            o.get_attribute("value")
            for o in browser.find_elements(By.CSS_SELECTOR, "#queue-choice option")
        ]
        assert "jobs" in options and "private" not in options
        browser.get(users_board.url + "/consumers")
        wait_for(browser, lambda d: d.find_elements(By.ID, "consumers"))
        assert browser.find_elements(By.CSS_SELECTOR, "#consumers tr[data-consumer]") == []
    assert users_board.get("/browse/private")[0] == 302  # no session: to the sign-in page


def test_bad_requests_say_what_is_wrong(console_board: ConsoleBoard) -> None:
    """Plain GETs (no browser): a missing queue or message is 404, a bad
    view, limit or section 400, each saying what is wrong."""
    c = console_board.client()
    c.create_queue("jobs")
    c.post("jobs", ("job", 1))
    for path, status, says in [
        ("/browse/nope", 404, "nope"),
        ("/browse/jobs/7", 404, "holds no message 7"),
        ("/browse/jobs/1?view=xml", 400, "view: one of text, json, hex"),
        ("/browse/jobs?limit=0", 400, "limit: from 1 to 500"),
        ("/browse/jobs?section=old", 400, "section: unprocessed, history, scheduled or empty"),
        ("/browse/jobs?filter=priority+%3E", 400, "pattern.filter"),
        ("/deadletters/nope", 404, "nope"),
    ]:
        got, text = console_board.get(path)
        assert (got, says in text) == (status, True), (path, text[:500])


def test_a_script_in_a_message_stays_text(console_board: ConsoleBoard, browser: Any) -> None:
    c = console_board.client()
    c.create_queue("jobs")
    evil = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    c.post("jobs", ("<script>window.pwned = 3</script>",), headers={"x": evil}, body=evil)
    for path in ("/browse/jobs", "/browse/jobs/1", "/browse/jobs/1?view=json"):
        browser.get(console_board.url + path)
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "main h1"))
        assert browser.execute_script("return window.pwned === undefined")
        assert browser.find_elements(By.CSS_SELECTOR, "main script, main img") == []
    browser.get(console_board.url + "/browse/jobs/1?view=text")
    wait_for(browser, lambda d: d.find_elements(By.ID, "body"))
    assert by_id(browser, "body").text == evil
    assert evil in by_id(browser, "headers").text


# ----------------------------------------------------------------- network


def test_the_network_is_drawn_with_links(console_board: ConsoleBoard, browser: Any) -> None:
    c = console_board.client()
    c.create_queue("orders.dlq")
    c.create_queue("orders", dead_letter="orders.dlq", max_history=100)
    c.create_queue("work")
    c.create_queue("audit")
    c.create_selector(
        "orders", to="work", templates=[("order", int)], address="topic:eu.#", credit=10
    )
    c.create_selector("orders", op="copy", to="audit")
    c.post("orders", ("order", 1), address="eu.fr")
    with c.subscribe("work", credit=4):
        browser.get(console_board.url + "/network")
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "g.node-consumer"))
        labels = texts(browser, "#network text.edge-label")
        assert "MOVE · credit 10" in labels and "COPY · credit unlimited" in labels
        assert "dead letters" in labels
        assert 'topic:eu.# ["order", "?int"]' in texts(browser, "#network text.edge-pattern")
        nodes = {
            e.get_attribute("data-node")
            for e in browser.find_elements(By.CSS_SELECTOR, "#network g.node")
        }
        assert {"q:orders", "q:work", "q:audit", "q:orders.dlq"} <= nodes
        shoot(browser, "network")
        # Click through: the MOVE's label opens orders filtered by its pattern.
        browser.find_element(
            By.XPATH, "//*[@data-edge and .//*[text()='MOVE · credit 10']]//*[local-name()='a']"
        ).click()
        wait_for(browser, lambda d: "/browse/orders" in d.current_url)
        address = 'input[name="address"]'
        wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, address))
        assert browser.find_element(By.CSS_SELECTOR, address).get_attribute("value") == "topic:eu.#"
        # The order it moved, now in orders' history.
        wait_for(browser, lambda d: seqs_shown(d, "messages") == [1])
        # A queue's box opens its Browse page; a consumer's its row.
        for node, page in (("q:audit", "/browse/audit"), ("c:", "/consumers#con-")):
            browser.get(console_board.url + "/network")
            press(browser, f'#network g.node[data-node^="{node}"] a')
            wait_for(browser, lambda d, page=page: page in d.current_url, message=page)
