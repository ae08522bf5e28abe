"""The console's cancel button (with its confirmation) and pause/resume, in a real headless
Chromium against ``surehand api`` (Debian's chromium driven by Playwright, as in
tests/browser/test_console_browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from surehand import Surehand
from surehand.config import Settings
from surehand.model import Bucket, EventKind
from tests.procs import Proc, free_port, spawn, wait_until
from tests.skips import missing

try:
    from playwright.sync_api import BrowserContext, Page
except ImportError:  # the dev extra has it
    missing("playwright (pip install -e '.[dev]')")


pytestmark = pytest.mark.slow

PM, DEV = "acme-alice-0123456789", "acme-dan-0123456789"
TOKENS = f"{PM}=alice:PM:acme,{DEV}=dan:DEV:acme"


@dataclass
class Console:
    url: str
    proc: Proc
    database_url: str

    def sh(self) -> Surehand:
        return Surehand(settings=Settings(database_url=self.database_url, tenant="acme"))


@pytest.fixture
def empty_console(tmp_path: Path) -> Iterator[Console]:
    port = free_port()
    database_url = f"sqlite:///{tmp_path / 'surehand.sqlite3'}"
    with Surehand(settings=Settings(database_url=database_url, tenant="acme")) as sh:
        sh.store.ensure_schema()
    env = {"SUREHAND_HOME": str(tmp_path), "SUREHAND_API_TOKENS": TOKENS}
    proc = spawn(["api", "--embedded", "--port", str(port)], env, tmp_path / "api.log")
    wait_until(
        lambda: "review console on" in proc.output() or proc.returncode is not None,
        timeout=60,
        what="surehand api to listen",
    )
    assert proc.returncode is None, proc.output()
    try:
        yield Console(f"http://127.0.0.1:{port}", proc, database_url)
    finally:
        if proc.returncode is None:
            proc.process.terminate()
            proc.process.wait(timeout=30)


def sign_in(context: BrowserContext, url: str, token: str, path: str) -> Page:
    page = context.new_page()
    page.goto(f"{url}{path}")
    page.fill("#token", token)
    page.click("form.stack button[type=submit]")
    page.wait_for_url(f"{url}{path}")
    return page


def new_task(empty_console: Console) -> str:
    with empty_console.sh() as sh:
        created = sh.write_task(sender="PM", recipient="DEV", subject="Tidy the logs")
    assert created.task_id is not None
    return created.task_id


def test_the_sender_cancels_from_the_task_page_after_confirming(
    context: BrowserContext, empty_console: Console
) -> None:
    task_id = new_task(empty_console)
    page = sign_in(context, empty_console.url, PM, f"/ui/tasks/{task_id}")
    page.click("#cancel-box summary")
    page.fill("#cancel-reason", "the logs were tidied by hand")
    page.click("#cancel-form button[type=submit]")  # not confirmed: the browser refuses
    assert "/cancel" not in page.url
    with empty_console.sh() as sh:
        assert sh.get_task(task_id).cancel is None
    page.check("#cancel-confirm")
    page.click("#cancel-form button[type=submit]")
    page.wait_for_url(f"{empty_console.url}/ui/tasks/{task_id}?done=cancel-archived")
    assert "Cancelled: the TASK is archived" in page.inner_text(".notice.outcome")
    assert "the logs were tidied by hand" in page.inner_text("#cancel-note")
    assert page.locator("#cancel-box").count() == 0  # nothing left to cancel
    with empty_console.sh() as sh:
        assert sh.get_task(task_id).bucket is Bucket.ARCHIVE
        [event] = [e for e in sh.history(task_id) if e.kind is EventKind.CANCEL_REQUESTED]
    assert (event.by, event.data["principal"]) == ("PM", "alice")


def test_the_recipient_gets_no_cancel_button(
    context: BrowserContext, empty_console: Console
) -> None:
    task_id = new_task(empty_console)
    page = sign_in(context, empty_console.url, DEV, f"/ui/tasks/{task_id}")
    assert page.locator("#cancel-box").count() == 0


def test_pausing_a_role_shows_on_every_page_until_it_is_resumed(
    context: BrowserContext, empty_console: Console
) -> None:
    task_id = new_task(empty_console)
    page = sign_in(context, empty_console.url, PM, "/ui/workers")
    page.fill("#pause-role", "DEV")
    page.fill("#pause-reason", "model provider down")
    page.click("#pause-form button[type=submit]")
    page.wait_for_url(f"{empty_console.url}/ui/workers?done=paused")
    assert "DEV (by PM: model provider down)" in page.inner_text("#paused-banner")
    page.goto(f"{empty_console.url}/ui/tasks/{task_id}")
    assert "this TASK waits until it is resumed" in page.inner_text("main")
    page.goto(f"{empty_console.url}/ui/")
    assert page.locator("#paused-banner").count() == 1
    dev = sign_in(context.browser.new_context(), empty_console.url, DEV, "/ui/workers")  # type: ignore[union-attr]
    assert dev.locator("#pause-form").count() == 0  # only ADMIN or PM pause
    page.goto(f"{empty_console.url}/ui/workers")
    page.click("#resume-DEV")
    page.wait_for_url(f"{empty_console.url}/ui/workers?done=resumed")
    assert page.locator("#paused-banner").count() == 0
    with empty_console.sh() as sh:
        assert sh.paused_roles() == []
