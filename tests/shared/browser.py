"""What other test modules need from ``tests/browser/test_ui_browser.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.skips import missing

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext


def chromium_path() -> str:
    """Debian's chromium, or skip (locally) / fail (in CI)."""
    found = shutil.which("chromium")
    if found:
        return found
    missing("chromium (apt-get install chromium): the browser tests drive it")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium under Playwright, one per module (imported here, not at collection: the plugin
    loads for every test and only the browser tests need Playwright)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # the dev extra has it
        missing("playwright (pip install -e '.[dev]')")
    executable = chromium_path()
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # Chromium's sandbox refuses root
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=args)
        yield launched
        launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A fresh browser context (cookies, storage) on a desktop-sized viewport."""
    made = browser.new_context(viewport={"width": 1280, "height": 900})
    yield made
    made.close()
