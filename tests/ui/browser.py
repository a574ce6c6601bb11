"""Fixtures of the browser tests (loaded by tests/conftest.py): Debian's chromium driven by
Playwright against a real `flashdesk serve`.

Every page gets a fresh browser context whose requests are all recorded and checked at
the end of the test: anything addressed outside this server fails the test (and is
aborted before it leaves the machine). A JavaScript error on the page fails it too.
Screenshots go to test-artifacts/ui/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from conftest import ROOT, serving

# Debian's chromium; where there is none (Ubuntu's apt has only a snap launcher) Playwright's own
# build, which scripts/test.sh fetches; FLASHDESK_TEST_CHROMIUM names another binary.
CHROMIUM = os.environ.get("FLASHDESK_TEST_CHROMIUM") or shutil.which("chromium")
# What works with no network beyond loopback (Playwright adds a fresh profile).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts" / "ui"


@pytest.fixture(scope="session")
def ui_home(tmp_path_factory, store) -> Path:
    home = tmp_path_factory.mktemp("ui-home")
    (home / "models").symlink_to(store.home / "models", target_is_directory=True)  # the model, not its history
    return home


@pytest.fixture(scope="session")
def ui_server(ui_home):
    with serving(ui_home, "--parallel", "2") as srv:
        yield srv


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import Error, sync_playwright

    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)  # None: Playwright's own chromium
        except Error as e:
            pytest.fail(f"no browser to test with ({e}). HINT: apt-get install chromium, or "
                        ".venv/bin/python -m playwright install chromium (or set FLASHDESK_TEST_CHROMIUM)")
        yield b
        b.close()


class Page:
    """A browser tab on the server, plus what it asked the network for."""

    def __init__(self, browser, base: str, locale: str):
        self.base = base
        self.requests: list[str] = []
        self.blocked: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(locale=locale, viewport={"width": 1280, "height": 800})
        self.context.route("**/*", self._guard)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))

    def _guard(self, route):
        url = route.request.url
        self.requests.append(url)
        host = urlsplit(url).hostname
        if url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost", "::1"):
            return route.continue_()
        self.blocked.append(url)
        return route.abort()

    def open(self, hash_route: str = "#/chat"):
        self.page.goto(f"{self.base}/{hash_route}")
        return self.page

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tab(browser, ui_server, request):
    """A fresh tab (English unless the test is marked `@pytest.mark.locale("zh-TW")`)."""
    marker = request.node.get_closest_marker("locale")
    t = Page(browser, ui_server.base, marker.args[0] if marker else "en-US")
    yield t
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:  # what the page showed when the test failed
        t.shot(f"FAILED-{request.node.name}")
    t.close()
    assert not t.blocked, f"the page tried to reach beyond this machine: {t.blocked}"
    # 4xx answers the UI handles (a 404 it shows the user) log a console line; page bugs do not pass
    bugs = [e for e in t.errors if "Failed to load resource" not in e]
    assert not bugs, f"JavaScript errors on the page: {bugs}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "call":
        item.report_call = outcome.get_result()


def pytest_configure(config):
    config.addinivalue_line("markers", "locale(code): the browser's language for the `tab` fixture")




