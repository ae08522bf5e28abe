"""What an approver does in the console (issue 20), through the same service calls as the API:
one answer per unsettled operation, approve, reject with rework, recover; who decided is named
everywhere; the held queue is most urgent first; the workers page shows sessions, leases and
lost sessions from the store and Redis.
"""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from surehand.cli import app as cli
from surehand.model import Admission, Bucket, OperationState
from tests.recovery_helpers import Rig
from tests.shared.console_actions import TOKENS, signed_in

pytestmark = pytest.mark.rig(api_tokens=TOKENS)


def test_each_unsettled_operation_gets_its_own_answer(rig_app: FastAPI, rig: Rig) -> None:
    """Before: one answer covered every unsettled operation of the attempt."""
    ops = [{"name": "charge", "args": {"amount": 5}}, {"name": "email", "args": {"to": "a@b"}}]
    task_id, _ = rig.interrupted(ops=ops)
    case = rig.lose(task_id)
    charge, email = rig.operations(task_id)
    client, csrf = signed_in(rig_app, "pm")
    page = client.get(f"/ui/cases/{case.case_id}").text
    assert f'name="effect-{charge.operation_id}"' in page
    assert f'name="effect-{email.operation_id}"' in page
    assert "The agent is not run again: the REPORT is built from the records" in page
    half = client.post(
        f"/ui/cases/{case.case_id}/review",
        data={"csrf_token": csrf, f"effect-{charge.operation_id}": "present", "note": "x"},
    )
    assert half.status_code == 400  # the e-mail was not answered: nothing is recorded
    assert rig.case_of(task_id).review is None
    answered = client.post(
        f"/ui/cases/{case.case_id}/review",
        data={
            "csrf_token": csrf,
            f"effect-{charge.operation_id}": "present",
            f"effect-{email.operation_id}": "absent",
            "note": "ledger has the charge; no e-mail in the outbox",
        },
    )
    assert answered.status_code == 303
    decided = rig.case_of(task_id)
    assert decided.admission is Admission.REEXECUTE  # the absent e-mail runs again
    assert decided.review is not None
    assert decided.review["effect"] == "mixed"
    assert decided.review["principal"] == "alice"
    charge, email = rig.operations(task_id)
    assert (charge.state, (charge.outcome or {}).get("probe")) == (
        OperationState.SUCCEEDED,
        "present",
    )
    assert (email.outcome or {}).get("probe") == "absent"
    shown = client.get(f"/ui/cases/{case.case_id}").text
    assert "happened (confirmed by a review)" in shown
    assert "did not happen (confirmed by a review)" in shown
    assert "Probe answer" not in shown


def test_the_audit_names_the_person_who_decided(rig_app: FastAPI, rig: Rig) -> None:
    """Before: "decided by PM on the review of PM" -- with two PM tokens, nobody could tell."""
    task_id, _ = rig.interrupted(ops=[{"name": "charge"}])
    case = rig.lose(task_id)
    client, csrf = signed_in(rig_app, "pm2")
    client.post(
        f"/ui/cases/{case.case_id}/review",
        data={"csrf_token": csrf, "effect": "absent", "note": "bob checked the ledger"},
    )
    audit = client.get(f"/ui/tasks/{task_id}/audit").text
    decided = re.findall(r"<dd data-decided-by>(.*?)</dd>", audit, re.S)
    assert len(decided) == 2
    assert "<strong>bob</strong> (PM) answered <strong>absent</strong>" in decided[1]
    history = rig.events(task_id)
    assert [e.principal for e in history if e.kind.value in ("review", "admission")][-2:] == [
        "bob",
        "bob",
    ]
    shown = CliRunner().invoke(cli, ["show", task_id, "--database-url", rig.store.url])
    assert "PM (bob)" in shown.stdout


def test_approve_and_reject_are_the_approvers_and_name_them(rig_app: FastAPI, rig: Rig) -> None:
    first, second = rig.new_task(), rig.new_task()
    for task_id in (first, second):
        rig.claim(task_id)
        rig.sh.write_report(task_id=task_id, reporter="DEV", body="done")
        rig.sh.transition(task_id, "submit", actor="DEV")
    dev, dev_csrf = signed_in(rig_app, "dev")
    assert 'id="approve-form"' not in dev.get(f"/ui/tasks/{first}").text
    assert dev.post(f"/ui/tasks/{first}/approve", data={"csrf_token": dev_csrf}).status_code == 403
    pm, csrf = signed_in(rig_app, "pm")
    assert 'id="approve-form"' in pm.get(f"/ui/tasks/{first}").text
    assert pm.post(f"/ui/tasks/{first}/approve", data={"csrf_token": "no"}).status_code == 403
    approved = pm.post(f"/ui/tasks/{first}/approve", data={"csrf_token": csrf})
    assert approved.headers["location"] == f"/ui/tasks/{first}?done=approved"
    assert "Approved: the TASK is done." in pm.get(approved.headers["location"]).text
    blank = pm.post(f"/ui/tasks/{second}/reject", data={"csrf_token": csrf, "reason": " "})
    assert blank.status_code == 400
    pm.post(f"/ui/tasks/{second}/reject", data={"csrf_token": csrf, "reason": "add tests"})
    assert rig.task(first).bucket is Bucket.DONE
    assert (rig.task(second).bucket, rig.task(second).rework_round) == (Bucket.ACTIVE, 1)
    moves = [e for e in rig.events(second) if e.action == "reject"]
    assert [(e.by, e.principal, e.reason) for e in moves] == [("PM", "alice", "add tests")]


def test_recover_asks_admission_and_says_what_it_answered(rig_app: FastAPI, rig: Rig) -> None:
    task_id, _ = rig.interrupted(ops=[])
    pm, csrf = signed_in(rig_app, "pm")
    answer = pm.post(f"/ui/tasks/{task_id}/recover", data={"csrf_token": csrf})
    assert answer.status_code == 303
    page = pm.get(answer.headers["location"]).text
    assert "Recover: not admitted" in page  # its lease is still missing for too short a time
    refusals = [e for e in rig.events(task_id) if e.kind.value == "admission"]
    assert refusals[-1].principal == "alice"


def test_the_held_queue_is_most_urgent_first(rig_app: FastAPI, rig: Rig) -> None:
    later = rig.new_task(priority="P2", subject="Routine charge")
    urgent = rig.new_task(priority="P0", subject="Urgent charge")
    for task_id in (later, urgent):
        session = rig.claim(task_id)
        rig.seed(session, ops=[{"name": "charge"}])
    rig.lose(later)  # the same passes find both
    held = [task.task_id for _case, task in rig.sh.held()]
    assert held == [urgent, later]
    pm, _ = signed_in(rig_app, "pm")
    page = pm.get("/ui/held").text
    assert page.index(urgent) < page.index(later)
    assert 'class="badge pri-P0"' in page
    assert pm.get("/ui/held/live").status_code == 200


def test_the_workers_page_shows_sessions_leases_and_losses(rig_app: FastAPI, rig: Rig) -> None:
    running = rig.new_task()
    session = rig.claim(running)
    rig.hold_lease(session)
    lost, _ = rig.interrupted(ops=[])
    rig.lose(lost)
    pm, _ = signed_in(rig_app, "pm")
    page = pm.get("/ui/workers").text
    running_row = page.split(f'data-task="{running}"')[1].split("</tr>")[0]
    assert "seeded-worker" in running_row
    assert "alive" in running_row
    lost_part = page.split("Lost")[1]
    assert lost in lost_part
    assert "last pass" in page  # the reconciler's passes (rig.lose ran two)
