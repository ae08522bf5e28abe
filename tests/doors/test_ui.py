"""The review console (``/ui/``) in process: sign-in, CSRF, tenants, roles, the review path.

A held TASK is seeded the way a real one arises (a claimed attempt that declared an unkeyed
intent, then lost its session and was found by two reconciler passes); the console is the
API's app under Starlette's test client, on both databases. The browser tests are in
``test_ui_browser.py``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import surehand.ui
from surehand.api import create_app
from surehand.cli import app as cli
from surehand.model import Admission, Bucket, EventKind
from surehand.store import Store
from surehand.testing import ManualClock
from tests.recovery_helpers import Rig, open_rig
from tests.shared.ui import TOKENS, browser, csrf_of, sign_in

UI_DIR = Path(surehand.ui.__file__).parent


@pytest.fixture
def held_rig(store: Store, clock: ManualClock, tmp_path: Path) -> Iterator[tuple[Rig, str]]:
    """A rig with API tokens and one TASK held for review (open intent without key or probe)."""
    with open_rig(store, clock, tmp_path, api_tokens=TOKENS) as rig:
        task_id, _session = rig.interrupted(ops=[{"name": "charge", "args": {"amount": 5}}])
        case = rig.lose(task_id)
        assert case.admission is Admission.HOLD_FOR_REVIEW
        yield rig, task_id


@pytest.fixture
def held_app(held_rig: tuple[Rig, str]) -> FastAPI:
    return create_app(held_rig[0].sh)


def use_cookie(client: TestClient, value: str, name: str = "surehand_console") -> None:
    """Replace the client's console cookies with ``name`` = ``value``."""
    client.cookies.clear()
    client.cookies.set(name, value, path="/ui")


def test_pages_need_a_session_and_the_cookie_is_httponly_lax_and_holds_only_an_id(
    held_app: FastAPI,
) -> None:
    client = browser(held_app)
    assert client.get("/ui/").headers["location"] == "/ui/sign-in?next=%2Fui%2F"
    form = client.get("/ui/sign-in")
    cookie = form.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=lax" in cookie  # links from chat and e-mail arrive signed in
    assert "path=/ui" in cookie
    wrong = client.post("/ui/sign-in", data={"token": "nope", "csrf_token": csrf_of(form.text)})
    assert wrong.status_code == 401
    sign_in(client, "pm")
    value = client.cookies["surehand_console"]
    assert len(value) >= 40
    assert "." not in value
    assert "alice" not in value
    assert "pm" not in value.lower().split("-")


def test_a_forged_or_foreign_cookie_is_not_a_session(
    held_app: FastAPI, held_rig: tuple[Rig, str]
) -> None:
    client = browser(held_app)
    sign_in(client, "dev")
    use_cookie(client, "x" * 43)
    assert client.get("/ui/").status_code == 303
    other = browser(create_app(held_rig[0].sh))  # another process: its own sessions
    sign_in(other, "pm")
    use_cookie(client, other.cookies["surehand_console"])
    assert client.get("/ui/").status_code == 303


def test_the_board_shows_the_held_task_with_counts(
    held_app: FastAPI, held_rig: tuple[Rig, str]
) -> None:
    _rig, task_id = held_rig
    client = browser(held_app)
    sign_in(client, "pm")
    board = client.get("/ui/").text
    assert f'data-task="{task_id}"' in board
    assert re.search(rf'class="card held" data-key="{task_id}" data-task="{task_id}"', board)
    assert 'id="h-held-strip"' in board  # held cases first, before the columns
    assert 'data-bucket-count="active">1<' in board
    assert 'data-bucket-count="inbox">0<' in board
    # Filters narrow the columns; the held strip always shows what waits for a decision.
    card = f'data-key="{task_id}"'
    assert card not in client.get("/ui/", params={"priority": "P0"}).text
    assert card in client.get("/ui/", params={"q": "charge the"}).text
    assert card not in client.get("/ui/board/live", params={"recipient": "QA"}).text
    assert client.get("/ui/", params={"priority": "P9"}).status_code == 400
    assert client.get("/ui/", params={"recipient": "not a role"}).status_code == 400
    assert card in client.get("/ui/", params={"recipient": "dev"}).text  # in any case
    assert task_id in client.get("/ui/held").text


@dataclass
class Visit:
    """A signed-in client and the held TASK's case."""

    client: TestClient
    csrf: str
    rig: Rig
    task_id: str
    case_id: str

    def case_page(self) -> Any:  # the test client's response
        return self.client.get(f"/ui/cases/{self.case_id}")

    def review(self, **form: str) -> Any:
        return self.client.post(f"/ui/cases/{self.case_id}/review", data=form)

    def reviewed(self) -> bool:
        return self.rig.case_of(self.task_id).review is not None


def visit(held_app: FastAPI, held_rig: tuple[Rig, str], token: str) -> Visit:
    rig, task_id = held_rig
    client = browser(held_app)
    csrf = sign_in(client, token)
    return Visit(client, csrf, rig, task_id, rig.case_of(task_id).case_id)


def test_the_case_page_shows_evidence_and_both_outcomes(
    held_app: FastAPI, held_rig: tuple[Rig, str]
) -> None:
    pm = visit(held_app, held_rig, "pm")
    page = pm.case_page().text
    assert pm.rig.case_of(pm.task_id).prior_lease_id in page  # in the technical record
    assert "open intent without key or probe" in page
    assert "begun, outcome unknown" in page
    assert "{&#34;amount&#34;: 5}" in page  # the intent's arguments
    present = page.split('data-after="present">')[1].split("</p>")[0]
    absent = page.split('data-after="absent">')[1].split("</p>")[0]
    assert "The agent is not run again: the REPORT is built from the records" in present
    assert "The agent runs again" in absent
    assert 'id="review-form"' in page


def test_a_dev_sees_no_review_form_and_cannot_post_one(
    held_app: FastAPI, held_rig: tuple[Rig, str]
) -> None:
    dev = visit(held_app, held_rig, "dev")
    page = dev.case_page().text
    assert 'id="review-form"' not in page
    assert "you act as DEV" in page
    refused = dev.review(csrf_token=dev.csrf, effect="absent", note="I am not the approver")
    assert refused.status_code == 403
    assert not dev.reviewed()


def test_another_tenants_task_and_case_answer_404(
    held_app: FastAPI, held_rig: tuple[Rig, str]
) -> None:
    other = visit(held_app, held_rig, "other")
    task_id = other.task_id
    for path in (
        f"/ui/tasks/{task_id}",
        f"/ui/tasks/{task_id}/live",
        f"/ui/tasks/{task_id}/audit",
        f"/ui/tasks/{task_id}/show.json",
        f"/ui/cases/{other.case_id}",
    ):
        assert other.client.get(path).status_code == 404, path
    assert task_id not in other.client.get("/ui/").text
    assert task_id not in other.client.get("/ui/held").text
    posted = other.review(csrf_token=other.csrf, effect="absent", note="not mine")
    assert posted.status_code == 404
    assert not other.reviewed()


def test_a_form_without_its_csrf_token_is_refused(
    held_app: FastAPI, held_rig: tuple[Rig, str]
) -> None:
    pm = visit(held_app, held_rig, "pm")
    assert pm.review(effect="absent", note="checked the ledger").status_code == 403
    wrong = pm.review(csrf_token="not-the-token", effect="absent", note="checked the ledger")
    assert wrong.status_code == 403
    assert pm.client.post("/ui/sign-out").status_code == 403
    assert browser(held_app).post("/ui/sign-in", data={"token": "pm"}).status_code == 403
    assert not pm.reviewed()


def test_a_review_goes_through_admission_and_its_outcome_is_shown(
    held_app: FastAPI, held_rig: tuple[Rig, str]
) -> None:
    pm = visit(held_app, held_rig, "pm")
    blank = pm.review(csrf_token=pm.csrf, effect="absent", note="  ")
    assert blank.status_code == 400
    assert "note" in blank.text
    answer = pm.review(csrf_token=pm.csrf, effect="absent", note="no charge in the ledger")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/ui/cases/{pm.case_id}?reviewed=true"
    decided = pm.rig.case_of(pm.task_id)
    assert decided.review is not None
    assert decided.review["by"] == "PM"
    assert decided.admission is Admission.REEXECUTE
    page = pm.client.get(answer.headers["location"]).text
    assert "Review recorded" in page
    assert "data-admission>reexecute<" in page
    assert 'id="review-form"' not in page  # no longer held
    again = pm.review(csrf_token=pm.csrf, effect="absent", note="no charge in the ledger")
    assert again.status_code == 409
    audit = pm.client.get(f"/ui/tasks/{pm.task_id}/audit").text
    assert "no charge in the ledger" in audit
    assert audit.count('class="card decision"') == 2  # the hold, then the reexecute


def test_show_json_is_what_the_cli_shows(held_app: FastAPI, held_rig: tuple[Rig, str]) -> None:
    rig, task_id = held_rig
    client = browser(held_app)
    sign_in(client, "pm")
    shown = client.get(f"/ui/tasks/{task_id}/show.json").json()
    cli_out = CliRunner().invoke(
        cli, ["show", task_id, "--json", "--database-url", rig.store.url], catch_exceptions=False
    )
    assert shown == json.loads(cli_out.stdout)
    decisions = [e for e in shown["history"] if e["kind"] == EventKind.ADMISSION.value]
    assert decisions
    task_page = client.get(f"/ui/tasks/{task_id}").text
    for op in shown["operations"]:
        assert op["fingerprint"] in task_page
    for attempt in shown["attempts"]:
        assert attempt["lease_id"] in task_page
        assert attempt["worker"] in task_page
    assert client.get(f"/ui/tasks/{task_id}/live").text.count("<section") == 6


def test_the_console_answers_only_allowed_hosts(held_app: FastAPI) -> None:
    assert browser(held_app, host="evil.example").get("/ui/sign-in").status_code == 421
    client = browser(held_app)
    origin = {"Origin": "http://evil.example"}
    assert client.get("/ui/sign-in", headers=origin).status_code == 403


def test_open_mode_signs_in_the_local_admin_on_loopback_only(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    with open_rig(store, clock, tmp_path) as rig:
        task_id = rig.new_task()
        held_app = create_app(rig.sh)
        local = TestClient(held_app, base_url="http://127.0.0.1", client=("127.0.0.1", 5000))
        remote = TestClient(held_app, base_url="http://127.0.0.1", client=("192.0.2.7", 5000))
        for client in (local, remote):
            client.follow_redirects = False
        form = local.get("/ui/sign-in").text
        assert "Continue as local ADMIN" in form
        assert local.post("/ui/sign-in", data={"csrf_token": csrf_of(form)}).status_code == 303
        board = local.get("/ui/")
        assert "local" in board.text
        assert task_id in board.text
        assert "Continue as local ADMIN" not in remote.get("/ui/sign-in").text
        fresh = TestClient(held_app, base_url="http://127.0.0.1", client=("127.0.0.1", 5001))
        anonymous = csrf_of(fresh.get("/ui/sign-in").text)  # a valid form, posted remotely
        use_cookie(remote, fresh.cookies["surehand_signin"], "surehand_signin")
        assert remote.post("/ui/sign-in", data={"csrf_token": anonymous}).status_code == 403
        use_cookie(remote, local.cookies["surehand_console"])
        assert remote.get("/ui/").status_code == 303  # a loopback session is not valid remotely
        assert rig.sh.get_task(task_id).bucket is Bucket.INBOX


# What reaching the store directly would take: a store handle, a connection or a transaction.
STORE_ACCESS = {"store", "engine", "transaction", "snapshot", "execute", "begin", "connect"}
# The service layer's read-only helpers the console may use beside ``Surehand``'s methods.
DISPATCHER_READS = {
    ("surehand.dispatcher", "dispatch"),  # dispatch.waiting_note, as `surehand show` shows it
    ("surehand.dispatcher.effects", "Evidence"),
    ("surehand.dispatcher.effects", "evaluate"),  # pure: "what would a review lead to"
    ("surehand.dispatcher.effects", "unsettled"),  # pure: which operations a review answers
    ("surehand.dispatcher.lifecycle", "approvers"),  # who gets the review form
    ("surehand.dispatcher.lifecycle", "cancellers"),  # who gets the cancel button
    ("surehand.dispatcher.pauses", "PAUSERS"),  # who gets the pause form
    ("surehand.dispatcher", "task_tree"),  # task_tree.held_lines, as `surehand show` says it
}
SERVICE_WRITES = {
    *("review", "recover", "transition", "write_task", "write_report", "reconcile"),
    *("cancel", "pause_role", "resume_role", "release_hold"),
}
# The console's acts, each the call the API's route makes: review, approve/reject, recover,
# cancel, pause and resume.
CONSOLE_WRITES = {
    *("review", "transition", "recover", "cancel", "pause_role", "resume_role", "release_hold")
}


def _imports(tree: ast.AST) -> Iterator[tuple[str, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield from ((node.module or "", alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from ((alias.name, "") for alias in node.names)


def test_the_console_calls_no_store_write_directly() -> None:
    """The console reaches the store only through ``Surehand``: no module of it imports
    ``surehand.store`` or SQLAlchemy, touches a store handle, connection or transaction, or
    imports a dispatcher function that writes; its writes are ``Surehand.review``,
    ``transition`` and ``recover``, the calls the API's routes make."""
    sources = {path.name: path.read_text(encoding="utf-8") for path in UI_DIR.glob("*.py")}
    assert set(sources) >= {"app.py", "routes.py", "signin.py", "views.py"}
    called: set[str] = set()
    for name, source in sources.items():
        tree = ast.parse(source)
        for module, imported in _imports(tree):
            assert not module.startswith(("surehand.store", "sqlalchemy")), (name, module)
            assert (module, imported) != ("surehand", "store"), name
            if module.startswith("surehand.dispatcher"):
                assert (module, imported) in DISPATCHER_READS, (name, module, imported)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr not in STORE_ACCESS, (name, node.attr)
                if isinstance(node.value, ast.Name) and node.value.id == "dispatch":
                    assert node.attr == "waiting_note", (name, node.attr)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                called.add(node.func.attr)
    assert called & SERVICE_WRITES == CONSOLE_WRITES
    api_routes = (UI_DIR.parent / "api" / "routes.py").read_text(encoding="utf-8")
    for write in CONSOLE_WRITES:
        assert f"caller.sh.{write}(" in api_routes
        assert f"viewer.sh.{write}(" in sources["record_routes.py"]


def test_templates_and_static_files_are_package_data() -> None:
    pyproject = (UI_DIR.parent.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '"ui/templates/*.html"' in pyproject
    assert '"ui/static/*"' in pyproject
    assert {p.name for p in (UI_DIR / "static").iterdir()} == {"console.css", "console.js"}
