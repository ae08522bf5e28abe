"""The operators' console in a real headless Chromium (issue 20), against ``surehand api`` as a
deployment runs it, with 2,000 TASKs in the inbox and a TASK held for review.

Each test is one claim of the issue: a search finds a TASK older than the newest 300; paging
walks all 2,000 with no duplicates or gaps; a link from another origin lands on the case after
sign-in and signs nobody out; the live refresh keeps keyboard focus and a text selection (and
says when the server is gone); the audit names the person who decided; sign-out kills a copied
cookie; sign-in is throttled; two tenants' REPORT and operation ids reveal no volume.

Debian's ``chromium``, driven by Playwright's Python client (never a browser download); the
browser fixture is ``test_ui_browser``'s.
"""

from __future__ import annotations

import http.server
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from surehand import Surehand
from surehand.config import Settings
from surehand.store import Store
from surehand.testing import ManualClock
from tests.procs import Proc, free_port, spawn, wait_until
from tests.recovery_helpers import open_rig
from tests.skips import missing

try:
    from playwright.sync_api import Browser, BrowserContext, Page
except ImportError:  # the dev extra has it
    missing("playwright (pip install -e '.[dev]')")
import itertools

pytestmark = pytest.mark.slow

PM, PM2, OTHER = "acme-alice-0123456789", "acme-bob-0123456789", "globex-olga-0123456789"
TOKENS = f"{PM}=alice:PM:acme,{PM2}=bob:PM:acme,{OTHER}=olga:PM:globex"
INBOX = 2000
WAIT_MS = 30_000


@dataclass
class Console:
    url: str
    proc: Proc
    held_task: str
    case_id: str
    oldest: str  # the oldest inbox TASK's id
    ledger_task: str  # acme's TASK with REPORTs and operations interleaved with globex's


def _seed(home: Path) -> tuple[str, str, str, str]:
    """2,000 inbox TASKs, a held one, and a TASK whose REPORTs and operations were written
    between globex's: all in the SQLite file ``surehand api`` will serve."""
    store = Store(f"sqlite:///{home / 'surehand.sqlite3'}")
    store.ensure_schema()
    clock = ManualClock()
    with Surehand(settings=Settings(database_url=store.url, tenant="acme"), clock=clock) as sh:
        for number in range(INBOX):
            clock.advance(1)
            sh.write_task(
                sender="PM",
                recipient="QA",
                subject=f"Routine chore {number:04d}",
                body=f"Item {number} of the backlog.",
                client_submission_id=f"chore-{number}",
            )
        oldest = sh.find_tasks(text="Routine chore 0000").tasks[0].task_id
    with (
        open_rig(store, clock, home, tenant="acme") as acme,
        open_rig(store, clock, home, tenant="globex") as globex,
    ):
        held, _ = acme.interrupted(
            ops=[{"name": "charge", "args": {"invoice": "INV-42", "amount": 5}}]
        )
        case = acme.lose(held)
        ledger = acme.new_task(subject="Ledger of ids")
        session = acme.claim(ledger)
        other = globex.claim(globex.new_task())
        for number in range(6):
            acme.intent(session, f"step{number}", args={"n": number})
            acme.sh.write_report(
                task_id=ledger, reporter="DEV", body=f"progress {number}", status="in_progress"
            )
            for burst in range(3):  # globex's volume in between
                globex.intent(other, "noise", args={"n": number, "burst": burst})
                globex.sh.write_report(
                    task_id=other.task_id,
                    reporter="DEV",
                    body=f"noise {number}.{burst}",
                    status="in_progress",
                )
    store.dispose()
    return held, case.case_id, oldest, ledger


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    home = tmp_path_factory.mktemp("console")
    held, case_id, oldest, ledger = _seed(home)
    port = free_port()
    env = {"SUREHAND_HOME": str(home), "SUREHAND_API_TOKENS": TOKENS}
    proc = spawn(["api", "--embedded", "--port", str(port)], env, home / "api.log")
    url = f"http://127.0.0.1:{port}"
    wait_until(
        lambda: "review console on" in proc.output() or proc.returncode is not None,
        timeout=60,
        what="surehand api to listen",
    )
    assert proc.returncode is None, proc.output()
    assert f"review console on {url}/ui/" in proc.output()
    try:
        yield Console(url, proc, held, case_id, oldest, ledger)
    finally:
        if proc.returncode is None:
            proc.process.terminate()
            proc.process.wait(timeout=30)


def sign_in(context: BrowserContext, url: str, token: str, path: str = "/ui/") -> Page:
    page = context.new_page()
    page.goto(f"{url}{path}")
    assert "/ui/sign-in" in page.url
    page.fill("#token", token)
    page.click("form.stack button[type=submit]")
    page.wait_for_url(f"{url}{path}")
    return page


def test_search_finds_a_task_older_than_the_newest_300(
    context: BrowserContext, console: Console
) -> None:
    page = sign_in(context, console.url, PM, "/ui/?recipient=qa")
    assert page.inner_text('[data-bucket-count="inbox"]') == "2,000"  # exact, not "300+"
    page.fill("#f-q", "routine CHORE 0000")
    page.press("#f-q", "Enter")
    page.wait_for_selector(f'.column [data-task="{console.oldest}"]')
    assert page.inner_text('[data-bucket-count="inbox"]') == "1"
    page.fill("#goto", "chore-1")  # a submission id in the go-to box
    page.press("#goto", "Enter")
    page.wait_for_url(re.compile(r"/ui/tasks/TASK-"))
    assert "Routine chore 0001" in page.inner_text("h1")


def test_paging_walks_all_2000_with_no_duplicates_or_gaps(
    context: BrowserContext, console: Console
) -> None:
    page = sign_in(context, console.url, PM)
    page.goto(f"{console.url}/ui/list/inbox?recipient=QA")
    assert page.inner_text("[data-total]") == "2,000"
    seen: list[str] = []
    while True:
        seen += page.eval_on_selector_all(
            "#rows tbody tr", "rows => rows.map(r => r.getAttribute('data-task'))"
        )
        older = page.locator("a[rel=next]")
        if older.count() == 0:
            break
        older.click()
        page.wait_for_load_state()
    assert len(seen) == INBOX
    assert len(set(seen)) == INBOX
    assert seen[-1] == console.oldest


def test_a_link_from_another_origin_lands_on_the_case_and_signs_nobody_out(
    context: BrowserContext, console: Console
) -> None:
    case_path = f"/ui/cases/{console.case_id}"
    with _other_site(f"{console.url}{case_path}", f"{console.url}/ui/sign-in") as site:
        fresh = context.new_page()
        fresh.goto(site)
        fresh.click("#to-case")
        fresh.wait_for_url(re.compile(r"/ui/sign-in\?next="))
        fresh.fill("#token", PM)
        fresh.click("form.stack button[type=submit]")
        fresh.wait_for_url(f"{console.url}{case_path}")
        assert "Did it happen?" in fresh.inner_text("h1")
        cookie = _session_cookie(context)
        # Signed in now: the links from that site (to the case, to the sign-in page) keep it.
        for link in ("#to-case", "#to-sign-in"):
            fresh.goto(site)
            fresh.click(link)
            fresh.wait_for_load_state()
            assert "/ui/sign-in" not in fresh.url, link
        assert _session_cookie(context) == cookie
        fresh.goto(f"{console.url}/ui/held")
        assert console.case_id in fresh.inner_text("main")


def test_the_live_refresh_keeps_focus_and_selection(
    context: BrowserContext, console: Console
) -> None:
    """Before: every refresh replaced the board: focus went back to ``body`` and a selection
    was lost. Now a refresh that brings a new TASK changes only what changed."""
    page = sign_in(context, console.url, PM)
    held = f'[data-key="held-{console.case_id}"]'
    page.evaluate(
        """(selector) => { const node = document.querySelector(selector);
        const range = document.createRange(); range.selectNodeContents(node);
        const selection = window.getSelection(); selection.removeAllRanges();
        selection.addRange(range); }""",
        f"{held} .subject",
    )
    chosen = page.evaluate("window.getSelection().toString()")
    assert chosen == "Charge the customer"
    page.focus(f"{held} a.tid")
    new = context.request.post(
        f"{console.url}/v1/tasks",
        headers={"Authorization": f"Bearer {PM}"},
        data={"sender": "PM", "recipient": "OPS", "subject": "Arrived while you looked"},
    )
    assert new.status == 201
    task_id = new.json()["task_id"]
    page.wait_for_selector(f'.column [data-task="{task_id}"]', timeout=WAIT_MS)
    assert page.evaluate("document.activeElement.textContent") == console.held_task
    assert page.evaluate("window.getSelection().toString()") == chosen
    assert page.locator("#stale").is_hidden()


def test_the_audit_names_the_person_who_decided(context: BrowserContext, console: Console) -> None:
    page = sign_in(context, console.url, PM2, f"/ui/cases/{console.case_id}")
    page.check("input[name^=effect-][value=absent]")
    page.fill("#note", "bob checked the billing ledger: no charge for INV-42")
    page.click("#review-form button[type=submit]")
    page.wait_for_url(re.compile(r"reviewed=true"))
    assert "bob" in page.inner_text("#outcome")
    page.goto(f"{console.url}/ui/tasks/{console.held_task}/audit")
    decided = page.locator("[data-decided-by]").all_inner_texts()
    assert any(text.startswith("bob (PM) answered absent") for text in decided), decided


def test_sign_out_kills_a_copied_cookie(browser: Browser, console: Console) -> None:
    owner = browser.new_context()
    thief = browser.new_context()
    try:
        page = sign_in(owner, console.url, PM)
        thief.add_cookies(owner.cookies())  # type: ignore[arg-type]
        stolen = thief.new_page()
        stolen.goto(f"{console.url}/ui/")
        assert "/ui/sign-in" not in stolen.url  # the copy works while the session lives
        page.click("text=Sign out")
        page.wait_for_url(re.compile(r"/ui/sign-in"))
        stolen.goto(f"{console.url}/ui/held")
        assert "/ui/sign-in" in stolen.url
    finally:
        owner.close()
        thief.close()


def test_two_tenants_report_and_operation_ids_reveal_no_volume(
    context: BrowserContext, console: Console
) -> None:
    page = sign_in(context, console.url, PM)
    page.goto(f"{console.url}/ui/tasks/{console.ledger_task}")
    reports = page.eval_on_selector_all(
        "[data-report-id]", "nodes => nodes.map(n => n.getAttribute('data-report-id'))"
    )
    operations = [
        int(text.lstrip("#")) for text in page.locator("[data-operation-id]").all_inner_texts()
    ]
    numbers = [int(report.rsplit("-", 1)[1]) for report in reports]
    for ids in (numbers, operations):
        assert len(ids) == 6
        assert len(set(ids)) == 6
        ordered = sorted(ids)
        # globex wrote 3 between each of acme's: sequential ids would step by 4.
        assert {b - a for a, b in itertools.pairwise(ordered)} != {4}
        assert ordered != list(range(ordered[0], ordered[0] + 6))


def test_the_board_says_so_when_the_server_is_unreachable(
    context: BrowserContext, console: Console
) -> None:
    page = sign_in(context, console.url, PM)
    assert page.locator("#stale").is_hidden()
    context.set_offline(True)
    try:
        page.wait_for_selector("#stale", state="visible", timeout=WAIT_MS)
        assert "does not answer" in page.inner_text("#stale")
    finally:
        context.set_offline(False)
    page.wait_for_selector("#stale", state="hidden", timeout=WAIT_MS)


def test_sign_in_is_throttled(context: BrowserContext, console: Console) -> None:
    """Last: it locks this client (127.0.0.1) out for wrong tokens for a while; a right token
    still signs in (issue 30: every local process shares 127.0.0.1)."""
    page = context.new_page()

    def sign_in(token: str) -> int:
        page.goto(f"{console.url}/ui/sign-in")
        page.fill("#token", token)
        with page.expect_response(lambda r: r.request.method == "POST") as answer:
            page.click("form.stack button[type=submit]")
        return answer.value.status

    statuses = [sign_in(f"a-wrong-guess-{number:08d}") for number in range(11)]
    assert statuses == [401] * 10 + [429]
    assert "too many failed attempts" in page.inner_text("main")
    assert "failed attempt 10 from 127.0.0.1" in console.proc.output()
    assert sign_in(PM) in (200, 303)  # the redirect is followed: signed in, on the board
    assert "sign-in" not in page.url


def _session_cookie(context: BrowserContext) -> str:
    return next(c["value"] for c in context.cookies() if c["name"] == "surehand_console")


class _Links(http.server.BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None


class _other_site:
    """Another origin (another port on localhost) whose page links into the console."""

    def __init__(self, case_url: str, sign_in_url: str) -> None:
        html = (
            f"<a id='to-case' href='{case_url}'>case</a> "
            f"<a id='to-sign-in' href='{sign_in_url}'>sign in</a>"
        )
        handler = type("Links", (_Links,), {"page": html.encode()})
        self.server = http.server.ThreadingHTTPServer(("localhost", 0), handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://localhost:{self.server.server_address[1]}/"

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
