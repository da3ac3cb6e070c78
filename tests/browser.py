"""The console's browser tests' parts: a real board and a real browser.

``ConsoleBoard`` is ``msgboard serve`` in a child process (port 0, a real
LMDB directory, ``--metrics-listen 127.0.0.1:0``), with a users file when a
test gives users (``User``: name, token, rules), and a ``Client`` for it
over gRPC. ``chrome()`` is Selenium 4 driving Debian's headless Chromium
through Debian's chromedriver (``scripts/setup --dev`` installs both;
nothing downloads a browser). The fixtures ``console_board`` (the open
board), ``users_board`` (a board with the users of ``USERS``) and
``browser`` put them together; a test waits with ``wait_for`` (generous
deadlines, never a sleep: the machine is loaded).

``shoot(driver, name)`` saves a screenshot to ``docs/console/NAME.png``
when ``MSGBOARD_SCREENSHOTS=1`` (``scripts/console-screenshots`` runs the
tests that way); docs/console.md shows them.
"""

from __future__ import annotations

import dataclasses
import http.client
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from msgboard.client import Client
from msgboard.security.auth import token_hash
from tests.served import Served

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "console"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: Seconds a browser test waits for something to show (the page refreshes
#: every 5 s; the machine may be busy).
WAIT = 60.0


@dataclasses.dataclass(frozen=True)
class User:
    """A user of the users file: ``rules`` are (queue glob, verbs)."""

    name: str
    token: str
    rules: Sequence[tuple[str, Sequence[str]]]
    #: The common name of the user's client certificate ("": none).
    cert_cn: str = ""

    def toml(self) -> str:
        lines = ["[[user]]", f'name = "{self.name}"', f'token_sha256 = "{token_hash(self.token)}"']
        if self.cert_cn:
            lines.append(f'cert_cn = "{self.cert_cn}"')
        for glob, verbs in self.rules:
            quoted = ", ".join(f'"{v}"' for v in verbs)
            lines += ["[[user.allow]]", f'queues = "{glob}"', f"verbs = [{quoted}]"]
        return "\n".join(lines) + "\n"


#: The users of ``users_board``: an admin, an operator allowed everything
#: but admin on jobs*, and a reader of jobs* (no manage).
ADMIN = User("root", "root-token-1234567890", [("*", ["admin"])])
OPERATOR = User("olga", "olga-token-1234567890", [("jobs*", ["read", "write", "manage"])])
READER = User("rita", "rita-token-1234567890", [("jobs*", ["read"])])
USERS = (ADMIN, OPERATOR, READER)


class ConsoleBoard:
    """A served board with its HTTP listener (metrics and console)."""

    def __init__(self, tmp: Path, users: Sequence[User] = (), *args: str) -> None:
        extra: list[str] = ["--metrics-listen", "127.0.0.1:0", *args]
        self.users = list(users)
        if users:
            path = tmp / "users.toml"
            path.write_text("".join(u.toml() for u in users))
            extra += ["--users", str(path), "--snapshot-dir", str(tmp / "snapshots")]
        self.served = Served(tmp, *extra, wait=False)
        ready = self.served.wait_ready()
        self.address = self.served.address
        #: HOST:PORT of the HTTP listener.
        self.http = str(ready["metrics"])
        self.url = f"http://{self.http}"

    def client(self, user: User | None = None) -> Client:
        token = user.token if user is not None else (self.users[0].token if self.users else "")
        return Client(self.address, timeout=30, token=token or None)

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        """A plain GET (no browser): status and body."""
        return self.request("GET", path, headers=headers)

    def request(
        self, method: str, path: str, body: str = "", headers: dict[str, str] | None = None
    ) -> tuple[int, str]:
        host, _, port = self.http.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request(method, path, body=body or None, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()

    def stop(self) -> None:
        self.served.stop()


def chrome() -> Any:
    """Selenium 4 with Debian's headless Chromium and chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail(
            f"{CHROMIUM} and {CHROMEDRIVER} are needed: run scripts/setup --dev "
            "(Debian's chromium and chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT)
    return driver


def wait_for(driver: Any, what: Callable[[Any], T], timeout: float = WAIT, message: str = "") -> T:
    """``what(driver)`` once it is truthy (WebDriverWait, polling); an
    element that htmx replaced meanwhile (stale) is tried again."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(
        driver, timeout, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
    )
    result: T = wait.until(what, message)
    return result


def click(driver: Any, css: str) -> None:
    """Clicks the element ``css`` finds, once it is there (found and
    clicked in one go: htmx may replace it between two steps)."""
    wait_for(
        driver,
        lambda d: d.execute_script(
            "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e;", css
        ),
        message=f"nothing to click at {css}",
    )


def shoot(driver: Any, name: str) -> None:
    """docs/console/NAME.png, when MSGBOARD_SCREENSHOTS=1."""
    if os.environ.get("MSGBOARD_SCREENSHOTS") != "1":
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def sign_in(driver: Any, board: ConsoleBoard, user: User) -> None:
    """Signs ``user`` in through the sign-in form, and waits for the overview."""
    from selenium.webdriver.common.by import By

    driver.get(board.url + "/signin")
    driver.find_element(By.ID, "token").send_keys(user.token)
    driver.find_element(By.ID, "signin").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "me"), message="not signed in")


@pytest.fixture
def console_board(tmp_path: Path) -> Iterator[ConsoleBoard]:
    """The open board (no users file) with its console."""
    b = ConsoleBoard(tmp_path)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def users_board(tmp_path: Path) -> Iterator[ConsoleBoard]:
    """A board with a users file (``USERS``) and its console."""
    b = ConsoleBoard(tmp_path, USERS)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    driver = chrome()
    try:
        yield driver
    finally:
        driver.quit()
