"""Hostile and careless input on every door (issue 11, findings 1, 4, 5, 6 and 8).

Every argument that reaches the store is validated first, by one layer (``surehand.requests``)
that the Python API, the CLI, HTTP and MCP share: bad input is a typed ``ValidationFailed``
naming the field (400 on HTTP, exit 5 on the CLI), with nothing written, and the same answer on
SQLite and Postgres. Lengths are checked after NFC normalisation, integers are bounded, and NUL
and lone surrogates are refused in every string.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from surehand.api import create_app
from surehand.call_requests import CASE_ID_RE, MAX_TEXT, REPORT_ID_RE
from surehand.cli import app as cli_app
from surehand.errors import ValidationFailed
from surehand.facade import Surehand
from surehand.mcp.tools import Tools
from surehand.model import Action, Admission, EventKind
from surehand.requests import TASK_ID_RE
from surehand.store import Store, events, receipts, tasks
from surehand.store.schema import interruption_cases, reports
from surehand.store.schema import tasks as task_table
from tests.recovery_helpers import Rig, held_task
from tests.shared.doors import LOOPBACK, TENANT

TASK = {"sender": "PM", "recipient": "DEV", "subject": "Fix login", "body": "It fails."}
GROWS = "\u0344"  # one character that NFC turns into two (U+0308 U+0301)
LONG_TASK_ID = "TASK-20260101-" + "1" * 19  # 33 characters: one more than the column holds
EXIT_INVALID = 5


pytestmark = pytest.mark.sh_settings(tenant=TENANT)


def counts(sh: Surehand) -> tuple[int, int]:
    with sh.store.snapshot() as connection:
        return tasks.count(connection), receipts.count(connection)


def history_length(sh: Surehand, task_id: str) -> int:
    with sh.store.snapshot() as connection:
        return events.count(connection, task_id)


def refused(call: Any, field: str) -> ValidationFailed:
    """Run ``call``; it must raise ValidationFailed naming ``field``."""
    with pytest.raises(ValidationFailed) as caught:
        call()
    assert caught.value.field == field, caught.value
    assert caught.value.code == "invalid_request"
    return caught.value


def run_cli(store: Store, *args: str) -> Any:
    """``surehand ARGS --json`` in-process on the test store: (exit code, parsed JSON)."""
    result = CliRunner().invoke(
        cli_app, [*args, "--json", "--database-url", store.url, "--tenant", TENANT]
    )
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None


def claimed_task(sh: Surehand) -> str:
    task_id = sh.write_task(TASK).task_id
    assert task_id is not None
    sh.transition(task_id, Action.CLAIM, actor="DEV")
    return task_id


# -- finding 1: review effect is exactly "present" or "absent" -----------------------------


@pytest.mark.parametrize("effect", ["Present", "maybe", "PRESENT", " present", "", None, 1, True])
def test_review_with_an_effect_other_than_present_or_absent_is_refused(
    rig: Rig, effect: Any
) -> None:
    task_id, _ = held_task(rig)
    case = rig.case_of(task_id)
    before = len(rig.events(task_id))

    refused(
        lambda: rig.sh.review(case.case_id, effect=effect, note="checked", actor="PM"), "effect"
    )

    still = rig.case_of(task_id)
    assert still.admission is Admission.HOLD_FOR_REVIEW
    assert still.review is None
    assert rig.task(task_id).hold is not None
    assert len(rig.events(task_id)) == before
    assert [op.outcome for op in rig.operations(task_id)] == [None]


def test_review_with_a_bad_effect_is_refused_by_every_door(rig: Rig) -> None:
    task_id, _ = held_task(rig)
    case_id = rig.case_of(task_id).case_id
    args = ["review", case_id, "--effect", "maybe", "--note", "x", "--actor", "PM", "--json"]
    result = CliRunner().invoke(cli_app, [*args, "--database-url", rig.store.url])
    assert result.exit_code == EXIT_INVALID, result.output
    assert json.loads(result.stdout)["error"]["field"] == "effect"
    with TestClient(create_app(rig.sh), base_url="http://127.0.0.1", client=LOOPBACK) as client:
        answer = client.post(f"/v1/cases/{case_id}/review", json={"effect": "Present", "note": "x"})
    assert answer.status_code == 400
    assert answer.json()["field"] == "effect"
    assert rig.case_of(task_id).admission is Admission.HOLD_FOR_REVIEW


# -- finding 4: lengths after NFC; ids bounded by their columns ----------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"subject": GROWS * 512}, "subject"),
        ({"thread_key": GROWS * 255}, "thread_key"),
        ({"references": ["ok", GROWS * 200]}, "references"),
        ({"parent": LONG_TASK_ID}, "parent"),
        ({"depends_on": [LONG_TASK_ID]}, "depends_on"),
    ],
    ids=["subject", "thread_key", "references", "parent", "depends_on"],
)
def test_a_field_too_long_after_nfc_or_for_its_column_is_refused(
    sh: Surehand, fields: dict[str, Any], field: str
) -> None:
    refused(lambda: sh.write_task({**TASK, **fields, "client_submission_id": "s-1"}), field)
    assert counts(sh) == (0, 0)


def test_a_subject_of_512_characters_after_nfc_is_stored_whole(sh: Surehand) -> None:
    subject = GROWS * 256  # 512 characters once normalised
    task_id = sh.write_task({**TASK, "subject": subject}).task_id
    assert task_id is not None
    assert len(sh.get_task(task_id).fields.subject) == 512


def test_an_nfc_overlong_subject_is_refused_by_the_cli_and_http(
    sh: Surehand, http: TestClient
) -> None:
    code, answer = run_cli(
        sh.store, "submit", "--sender", "PM", "--recipient", "DEV", "--subject", GROWS * 512
    )
    assert code == EXIT_INVALID
    assert answer["error"]["field"] == "subject"
    response = http.post("/v1/tasks", json={**TASK, "subject": GROWS * 512})
    assert response.status_code == 400
    assert response.json()["field"] == "subject"
    assert counts(sh) == (0, 0)


@pytest.mark.parametrize(
    ("pattern", "longest", "column"),
    [
        (TASK_ID_RE, "TASK-20260101-" + "9" * 18, task_table.c.task_id),
        (REPORT_ID_RE, "REPORT-20260101-" + "9" * 16, reports.c.report_id),
        (CASE_ID_RE, "CASE-20260101-" + "9" * 18 + "-" + "9" * 18, interruption_cases.c.case_id),
    ],
    ids=["task_id", "report_id", "case_id"],
)
def test_every_id_pattern_fits_its_column(pattern: Any, longest: str, column: Any) -> None:
    assert pattern.match(longest)
    assert not pattern.match(longest + "9")
    assert len(longest) <= column.type.length


@pytest.mark.parametrize("read", ["get_task", "history", "reports", "attempts", "operations"])
def test_a_task_id_longer_than_its_column_is_refused_by_every_read(sh: Surehand, read: str) -> None:
    refused(lambda: getattr(sh, read)(LONG_TASK_ID), "task_id")


# -- finding 5: integers in range -----------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"limit": 10**20}, "limit"),
        ({"limit": -1}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"offset": 9223372036854775808}, "offset"),
        ({"offset": 2**31}, "offset"),
        ({"offset": -1}, "offset"),
        ({"offset": 1.5}, "offset"),
    ],
)
def test_list_tasks_refuses_integers_out_of_range(
    sh: Surehand, arguments: dict[str, Any], field: str
) -> None:
    sh.write_task(TASK)
    refused(lambda: sh.list_tasks(**arguments), field)


def test_cases_refuses_a_limit_out_of_range(sh: Surehand) -> None:
    refused(lambda: sh.cases(limit=10**20), "limit")
    refused(lambda: sh.cases(limit=-1), "limit")


def test_limit_and_offset_at_their_bounds_are_accepted(sh: Surehand) -> None:
    sh.write_task(TASK)
    assert len(sh.list_tasks(limit=1000, offset=0)) == 1
    assert sh.list_tasks(limit=1, offset=2**31 - 1) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("offset=9223372036854775808", "offset"),
        ("offset=2147483648", "offset"),
        ("limit=-1", "limit"),
        ("limit=100000000000000000000", "limit"),
    ],
)
def test_http_list_refuses_integers_out_of_range(http: TestClient, query: str, field: str) -> None:
    response = http.get(f"/v1/tasks?{query}")
    assert response.status_code == 400, response.text
    assert response.json()["field"] == field


# -- finding 6: reason, report_id and note; NUL in ids and filters --------------------------


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"reason": "a\x00b"}, "reason"),
        ({"reason": "x" * (5 * 1024 * 1024)}, "reason"),
        ({"reason": "x" * (MAX_TEXT + 1)}, "reason"),
        ({"reason": GROWS * (MAX_TEXT // 2 + 1)}, "reason"),
        ({"report_id": "REPORT-20260101-001\x00"}, "report_id"),
        ({"report_id": "R" * 300}, "report_id"),
    ],
    ids=["nul-reason", "5mb-reason", "4097-reason", "nfc-reason", "nul-report-id", "long-report"],
)
def test_transition_refuses_a_bad_reason_or_report_id_and_writes_nothing(
    sh: Surehand, arguments: dict[str, Any], field: str
) -> None:
    task_id = claimed_task(sh)
    before = history_length(sh, task_id)
    refused(lambda: sh.transition(task_id, Action.FINISH, actor="DEV", **arguments), field)
    assert history_length(sh, task_id) == before


def test_a_reason_of_exactly_the_limit_is_accepted(sh: Surehand) -> None:
    task_id = claimed_task(sh)
    sh.write_report(task_id=task_id, reporter="DEV", body="done")
    sh.transition(task_id, Action.SUBMIT, actor="DEV")
    moved = sh.transition(task_id, Action.REJECT, actor="PM", reason="r" * MAX_TEXT)
    assert moved.bucket.value == "active"
    assert sh.history(task_id)[-1].reason == "r" * MAX_TEXT


@pytest.mark.parametrize(
    ("note", "field"),
    [("a\x00b", "note"), ("x" * (5 * 1024 * 1024), "note"), ("\ud800", "note"), (" ", "note")],
    ids=["nul", "5mb", "surrogate", "blank"],
)
def test_review_refuses_a_bad_note_and_writes_nothing(rig: Rig, note: str, field: str) -> None:
    task_id, _ = held_task(rig)
    case = rig.case_of(task_id)
    before = len(rig.events(task_id))
    refused(lambda: rig.sh.review(case.case_id, effect="absent", note=note, actor="PM"), field)
    assert rig.case_of(task_id).review is None
    assert len(rig.events(task_id)) == before


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda sh: sh.get_task("TASK-20260101-001\x00"), "task_id"),
        (lambda sh: sh.history("TASK-20260101-001\x00"), "task_id"),
        (lambda sh: sh.case("CASE-20260101-001-1\x00"), "case_id"),
        (lambda sh: sh.cases(task_id="TASK-20260101-001\x00"), "task_id"),
        (lambda sh: sh.list_tasks(recipient="DEV\x00"), "recipient"),
        (lambda sh: sh.diagnose_submission("sub\x00"), "client_submission_id"),
    ],
    ids=["get_task", "history", "case", "cases", "list_tasks", "diagnose"],
)
def test_nul_in_an_id_or_filter_is_refused_the_same_on_both_databases(
    sh: Surehand, call: Any, field: str
) -> None:
    refused(lambda: call(sh), field)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/tasks/TASK-20260101-001%00", "task_id"),
        ("/v1/tasks/TASK-20260101-001%00/history", "task_id"),
        ("/v1/tasks?recipient=DEV%00", "recipient"),
        ("/v1/cases/CASE-20260101-001-1%00", "case_id"),
    ],
)
def test_http_refuses_nul_in_path_ids_and_filters(http: TestClient, path: str, field: str) -> None:
    response = http.get(path)
    assert response.status_code == 400, response.text
    assert response.json()["field"] == field


def test_http_transition_with_nul_in_the_reason_is_400_and_writes_nothing(
    sh: Surehand, http: TestClient
) -> None:
    task_id = claimed_task(sh)
    before = history_length(sh, task_id)
    response = http.post(
        f"/v1/tasks/{task_id}/transitions", json={"action": "finish", "reason": "a\x00b"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["field"] == "reason"
    assert history_length(sh, task_id) == before


def test_cli_move_with_nul_in_the_reason_exits_invalid(sh: Surehand) -> None:
    task_id = claimed_task(sh)
    code, answer = run_cli(
        sh.store, "move", task_id, "finish", "--actor", "DEV", "--reason", "a\x00"
    )
    assert code == EXIT_INVALID
    assert answer["error"]["field"] == "reason"


# -- finding 8: typed errors, never UnicodeEncodeError, ValueError, AttributeError, TypeError


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda sh: sh.get_task("TASK-\ud800"), "task_id"),
        (lambda sh: sh.list_tasks(recipient="D\udfff"), "recipient"),
        (lambda sh: sh.list_tasks(bucket="nope"), "bucket"),
        (lambda sh: sh.cases(state="nope"), "state"),
        (lambda sh: sh.cases(task_id="\ud800"), "task_id"),
        (lambda sh: sh.case("CASE-\ud800"), "case_id"),
        (lambda sh: sh.diagnose_submission("\ud800"), "client_submission_id"),
        (lambda sh: sh.transition("TASK-20260101-001", "fly", actor="PM"), "action"),
        (lambda sh: sh.transition("TASK-20260101-001", "claim", actor="DEV", reason=5), "reason"),
        (
            lambda sh: sh.transition("TASK-20260101-001", "claim", actor="DEV", reason="\ud800"),
            "reason",
        ),
        (lambda sh: sh.transition("TASK-\ud800", "claim", actor="DEV"), "task_id"),
        (
            lambda sh: sh.transition("TASK-20260101-001", "finish", actor="DEV", report_id=7),
            "report_id",
        ),
        (lambda sh: sh.recover("TASK-\ud800", actor="PM"), "task_id"),
        (lambda sh: sh.write_task(["sender", "PM"]), "request"),
        (lambda sh: sh.write_task({**TASK, "subject": 5}), "subject"),
        (lambda sh: sh.write_report(["task_id"]), "request"),
        (lambda sh: sh.write_report(task_id="TASK-\ud800", reporter="DEV", body="x"), "task_id"),
    ],
    ids=[
        "surrogate-task-id",
        "surrogate-recipient",
        "bad-bucket",
        "bad-state",
        "surrogate-case-filter",
        "surrogate-case-id",
        "surrogate-submission-id",
        "bad-action",
        "reason-int",
        "surrogate-reason",
        "surrogate-transition-id",
        "report-id-int",
        "surrogate-recover-id",
        "payload-list",
        "subject-int",
        "report-payload-list",
        "surrogate-report-task",
    ],
)
def test_bad_python_arguments_are_typed_errors_naming_the_field(
    sh: Surehand, call: Any, field: str
) -> None:
    refused(lambda: call(sh), field)
    assert counts(sh) == (0, 0)


def test_review_with_a_surrogate_case_id_is_typed(rig: Rig) -> None:
    refused(lambda: rig.sh.review("CASE-\ud800", effect="absent", note="x", actor="PM"), "case_id")


def test_a_refused_call_writes_no_event_kind(sh: Surehand) -> None:
    task_id = claimed_task(sh)
    kinds = [event.kind for event in sh.history(task_id)]
    refused(lambda: sh.transition(task_id, "finish", actor="DEV", reason="\x00"), "reason")
    assert [event.kind for event in sh.history(task_id)] == kinds == [EventKind.TRANSITION] * 2


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda tools: tools.list_tasks(offset=2**63), "offset"),
        (lambda tools: tools.list_tasks(recipient="DEV\x00"), "recipient"),
        (lambda tools: tools.read_task("TASK-20260101-001\x00"), "task_id"),
        (lambda tools: tools.task_status(LONG_TASK_ID), "task_id"),
    ],
    ids=["offset", "recipient", "read_task", "task_status"],
)
def test_mcp_tools_answer_bad_arguments_with_the_same_typed_error(
    sh: Surehand, call: Any, field: str
) -> None:
    result = call(Tools(sh))
    assert result.is_error
    error = result.structured_content["error"]
    assert (error["code"], error["field"]) == ("invalid_request", field)
