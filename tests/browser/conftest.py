"""Fixtures of the browser tests: a broker with its HTTP listener, headless Chromium, and a
console page whose script errors fail the test."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Error, Page, sync_playwright

from tests.brokerproc import RunningBroker, start_broker
from tests.browser.chromium import LAUNCH_ARGS, require_chromium, screenshot_dir


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = require_chromium()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, args=list(LAUNCH_ARGS), headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with start_broker(tmp_path / "broker", http=True) as running:
        yield running


@dataclass
class Console:
    """The console in a browser page, and what its scripts reported."""

    page: Page
    url: str
    shots: Path
    errors: list[str] = field(default_factory=list)
    #: Console errors a test provokes on purpose (regular expressions).
    expected: list[str] = field(default_factory=list)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def unexpected_errors(self) -> list[str]:
        return [
            error
            for error in self.errors
            if not any(re.search(pattern, error) for pattern in self.expected)
        ]

    def login(self, user: str = "guest", password: str = "guest") -> None:
        page = self.page
        page.goto(self.url)
        page.get_by_label("User").fill(user)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()

    def go(self, link: str) -> None:
        self.page.get_by_role("navigation").get_by_role("link", name=link).click()

    def status(self) -> str:
        return self.page.locator("#status").inner_text()


@pytest.fixture
def console(
    browser: Browser, broker: RunningBroker, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Console]:
    """A fresh page (its own session storage) on the broker's console. A script error (an
    uncaught exception, or console.error, which is also how Chromium reports a failed load)
    fails the test."""
    shots = screenshot_dir(tmp_path / "screenshots") / request.node.name
    shots.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {shots}")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    watched = Console(page, f"http://127.0.0.1:{broker.http_port}/", shots)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.errors.append(f"console.error: {message.text}")

    def on_page_error(error: Error) -> None:
        watched.errors.append(f"uncaught: {error}")

    page.on("console", on_console)
    page.on("pageerror", on_page_error)
    try:
        yield watched
    finally:
        context.close()
    unexpected = watched.unexpected_errors()
    assert not unexpected, f"the console's scripts reported errors: {unexpected}"
