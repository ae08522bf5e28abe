"""The review console in a real headless Chromium, against ``surehand up`` as a user runs it.

A TASK is held the way it happens in life: ``surehand up`` runs a DEV agent that declares an
effect without key or probe (``tests/ui_agents.py``) and is SIGKILLed inside it; the next ``up``
finds the session lost, and admission holds the TASK for review. Then, in the browser: a DEV
sees the case but no review form; another tenant's PM gets 404 for the TASK's and the case's
URLs; the PM signs in, sees the held TASK on the board, opens its case, has a form without
its CSRF token refused (403), reviews ``absent`` by keyboard, and watches the TASK run again
and reach ``review`` on its page, which refreshes itself.

The browser is Debian's ``chromium`` driven by Playwright's Python client (never a browser
download). Without it these tests skip locally and fail in CI. Screenshots of the board, held,
case, TASK and audit pages at 1280 and 390 px go to ``SUREHAND_TEST_ARTIFACTS`` (default: the test's
temporary directory); the test prints where.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.skips import missing

try:
    from playwright.sync_api import Browser, Page
except ImportError:  # the dev extra has it
    missing("playwright (pip install -e '.[dev]')")
from tests.procs import Proc, wait_until
from tests.shared.up import start_up, stop
from tests.ui_agents import EFFECTS_ENV, started

pytestmark = pytest.mark.slow

# Tokens as `surehand up` accepts them at start (16 characters or more).
PM, DEV, OTHER = "pm-token-0123456789", "dev-token-0123456789", "other-token-0123456789"
TOKENS = f"{PM}=alice:PM:acme,{DEV}=dave:DEV:acme,{OTHER}=olga:PM:globex"
FAST = {
    "SUREHAND_LEASE_TTL_SECONDS": "2",
    "SUREHAND_HEARTBEAT_SECONDS": "0.5",
    "SUREHAND_LOST_GRACE_SECONDS": "1",
    "SUREHAND_RECONCILE_INTERVAL_SECONDS": "0.5",
}
WIDTHS = {1280: 900, 390: 844}
WAIT_MS = 60_000


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("SUREHAND_TEST_ARTIFACTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    print(f"\nreview console screenshots: {where}")
    return where


@dataclass
class Held:
    """``surehand up`` serving a TASK held for review."""

    url: str
    task_id: str
    case_id: str
    ledger: Path


def _up_env(home: Path) -> dict[str, str]:
    return {
        "SUREHAND_API_TOKENS": TOKENS,
        "SUREHAND_AGENTS": "DEV=tests.ui_agents:charge",
        EFFECTS_ENV: str(home / "effects.jsonl"),
        **FAST,
    }


def _submit(url: str) -> str:
    answer = httpx.post(
        f"{url}/v1/tasks",
        headers={"Authorization": f"Bearer {PM}", "Idempotency-Key": "charge-inv-42"},
        json={
            "sender": "PM",
            "recipient": "DEV",
            "subject": "Charge invoice INV-42",
            "body": "Charge acme 5 EUR for INV-42 and report the receipt.",
            "priority": "P1",
            "references": ["invoice:INV-42"],
        },
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["task_id"])


def _hold(url: str, task_id: str) -> dict[str, str] | None:
    answer = httpx.get(f"{url}/v1/tasks/{task_id}", headers={"Authorization": f"Bearer {PM}"})
    return answer.json()["hold"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Held]:
    """Run the agent under ``up``, SIGKILL ``up`` inside its effect, start ``up`` again and
    wait for the reconciler to hold the TASK. Shared by this module's tests, which run in
    file order: the ones that only look come first, the PM's review last."""
    tmp_path = tmp_path_factory.mktemp("up")
    env, ledger = _up_env(tmp_path), tmp_path / "effects.jsonl"
    first, ready = start_up(tmp_path, env=env)
    try:
        task_id = _submit(ready["api"])
        wait_until(lambda: started(ledger) == [1], timeout=60, what="the effect to start")
    finally:
        first.kill(signal.SIGKILL)
    second, ready = start_up(tmp_path, env=env)
    try:
        url = ready["api"]
        wait_until(lambda: _hold(url, task_id) is not None, timeout=60, what="the hold")
        hold = _hold(url, task_id)
        assert hold is not None
        yield Held(url, task_id, hold["case_id"], ledger)
    finally:
        _stop(second)


def _stop(proc: Proc) -> None:
    if proc.returncode is None:
        assert stop(proc, signal.SIGINT) == 0, proc.output()[-3000:]


def signed_in(browser: Browser, url: str, token: str, *, javascript: bool = True) -> Page:
    """A new browser session signed in with ``token`` through the sign-in form."""
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, java_script_enabled=javascript
    )
    page = context.new_page()
    page.goto(f"{url}/ui/")
    assert "/ui/sign-in?next=" in page.url
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/ui/")
    return page


def shoot(page: Page, artifacts: Path, name: str) -> None:
    """Screenshots at 1280 and 390 px; neither may scroll sideways."""
    for width, height in WIDTHS.items():
        page.set_viewport_size({"width": width, "height": height})
        overflow = page.evaluate("document.documentElement.scrollWidth")
        wide = page.evaluate(
            "(w) => Array.from(document.querySelectorAll('body *'))"
            ".filter(e => e.getBoundingClientRect().right > w + 1)"
            ".slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + (e.id || ''))",
            width,
        )
        assert overflow <= width, f"{name} at {width} px is {overflow} px wide: {wide}"
        page.screenshot(path=str(artifacts / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_a_dev_sees_the_case_but_no_review_form(browser: Browser, held: Held) -> None:
    """Without JavaScript, too: every page is complete as the server renders it."""
    page = signed_in(browser, held.url, DEV, javascript=False)
    # In the held strip (first) and in its bucket's column.
    assert page.locator(f'.card.held[data-task="{held.task_id}"]').count() == 2
    assert page.locator(f'.held-strip [data-task="{held.task_id}"]').count() == 1
    page.goto(f"{held.url}/ui/cases/{held.case_id}")
    assert page.locator("text=open intent without key or probe").count() >= 1
    assert page.locator("text=Your answer").count() == 1  # still held
    assert page.locator("#review-form").count() == 0
    assert "you act as DEV" in page.inner_text("main")


def test_another_tenants_task_is_not_reachable_by_url(browser: Browser, held: Held) -> None:
    page = signed_in(browser, held.url, OTHER)
    for path in (f"tasks/{held.task_id}", f"cases/{held.case_id}", f"tasks/{held.task_id}/audit"):
        answer = page.goto(f"{held.url}/ui/{path}")
        assert answer is not None
        assert answer.status == 404, path
    page.goto(f"{held.url}/ui/")
    assert page.locator(f'[data-task="{held.task_id}"]').count() == 0


def test_a_pm_reviews_a_held_task_and_watches_it_run_again(
    browser: Browser, held: Held, artifacts: Path
) -> None:
    page = signed_in(browser, held.url, PM)
    card = page.locator(f'.held-strip .card.held[data-task="{held.task_id}"]')
    card.wait_for()
    shoot(page, artifacts, "board")
    page.click("nav >> text=Held")
    assert page.locator(f'a[href$="/cases/{held.case_id}"]').count() == 1
    shoot(page, artifacts, "held")
    page.go_back()
    card.locator("a.badge.hold").click()
    page.wait_for_url(f"**/ui/cases/{held.case_id}")
    assert page.locator("#review-form").count() == 1
    shoot(page, artifacts, "case")
    _refused_without_csrf(page)
    _review_absent_by_keyboard(page, held)
    page.click("text=follow it")
    page.wait_for_url(f"**/ui/tasks/{held.task_id}")
    page.evaluate("window.sameDocument = true")
    page.wait_for_selector('#task-live [data-bucket="review"]', timeout=WAIT_MS)
    page.wait_for_selector("#task-live[data-refreshed]", timeout=WAIT_MS)
    assert page.evaluate("window.sameDocument") is True  # refreshed in place, not reloaded
    assert "Charged on attempt 2." in page.inner_text("main")
    shoot(page, artifacts, "task")
    page.click("text=Admission audit")
    assert page.locator(".decision").count() == 2
    shoot(page, artifacts, "audit")
    assert started(held.ledger) == [1, 2]  # absent: the effect ran again, once


def _refused_without_csrf(page: Page) -> None:
    """The same form with its CSRF token removed is refused, and nothing is recorded."""
    page.evaluate("document.querySelector('#review-form [name=csrf_token]').remove()")
    page.check("input[name^=effect-][value=absent]")
    page.fill("#note", "posted without a CSRF token")
    with page.expect_response(lambda r: r.url.endswith("/review")) as answer:
        page.click("#review-form button[type=submit]")
    assert answer.value.status == 403
    page.go_back()
    page.reload()
    assert page.locator("#review-form").count() == 1  # still held


def _review_absent_by_keyboard(page: Page, held: Held) -> None:
    page.focus("input[name^=effect-][value=absent]")
    page.keyboard.press("Space")
    page.keyboard.press("Tab")
    page.keyboard.type("Checked the billing ledger: no charge for INV-42.")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/ui/cases/{held.case_id}?reviewed=true")
    assert page.inner_text("[data-admission]") == "reexecute"
    assert page.inner_text("[data-review-effect]") == "absent"
