"""Who may say what (issue 11, findings 3 and 7), on both databases and every door concerned.

``sender`` (and the acting ``reporter``/``actor``) is the caller's role: only an ADMIN principal
may act for another role, and its event records that it did. ``recover`` belongs to the TASK's
approvers (the runtime recovers through the reconciler); a refused call records nothing, and a
request that is not admitted is recorded once per caller and reason within a window, so no
caller can grow a TASK's history without bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from surehand.api import create_app
from surehand.cli import app as cli_app
from surehand.dispatcher.recovery import REFUSAL_WINDOW
from surehand.errors import ConfigError, Forbidden, IllegalTransition, NotAuthorized
from surehand.facade import Surehand
from surehand.model import Action, AttemptState, EventKind
from surehand.principals import Principal
from surehand.store import Store, tasks
from surehand.testing import ManualClock
from tests.recovery_helpers import GRACE_SECONDS, Rig, held_task, open_rig

TOKENS = "tok-pm=alice:PM:acme,tok-dev=dan:DEV:acme,tok-admin=root:ADMIN:acme"
TASK = {"sender": "PM", "recipient": "DEV", "subject": "Fix login", "body": "It fails."}
DEV = Principal("dan", "DEV", "acme")
EXIT_REFUSED = 6


pytestmark = pytest.mark.sh_settings(api_tokens=TOKENS, tenant="acme")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def token_rig(store: Store, clock: ManualClock, tmp_path: Path) -> Iterator[Rig]:
    """A recovery rig in tenant acme whose HTTP door knows the tokens."""
    with open_rig(store, clock, tmp_path, tenant="acme", api_tokens=TOKENS) as built:
        yield built


def task_count(sh: Surehand) -> int:
    with sh.store.snapshot() as connection:
        return tasks.count(connection)


# -- finding 3: sender is the caller's role ------------------------------------------------


@pytest.mark.parametrize("sender", ["ADMIN", "PM", "QA"])
def test_a_dev_token_may_not_claim_another_sender(
    http: TestClient, sh: Surehand, sender: str
) -> None:
    response = http.post("/v1/tasks", json={**TASK, "sender": sender}, headers=bearer("tok-dev"))
    assert response.status_code == 403, response.text
    assert response.json()["field"] == "sender"
    assert task_count(sh) == 0


def test_a_token_sends_as_its_own_role_and_its_name_is_recorded(
    http: TestClient, sh: Surehand
) -> None:
    response = http.post("/v1/tasks", json=TASK, headers=bearer("tok-pm"))
    assert response.status_code == 201, response.text
    [created] = sh.history(response.json()["task_id"])
    assert (created.by, created.principal) == ("PM", "alice")
    assert created.data == {"principal": "alice", "principal_role": "PM"}  # nobody else's


def test_an_admin_token_may_send_for_another_role_and_that_is_recorded(
    http: TestClient, sh: Surehand
) -> None:
    response = http.post("/v1/tasks", json=TASK, headers=bearer("tok-admin"))
    assert response.status_code == 201, response.text
    task_id = response.json()["task_id"]
    assert sh.get_task(task_id).fields.sender == "PM"
    [created] = sh.history(task_id)
    assert created.by == "PM"
    assert created.data == {"on_behalf_of": "PM", "principal": "root", "principal_role": "ADMIN"}


def test_an_admin_acting_as_another_role_in_a_move_or_report_is_recorded(
    http: TestClient, sh: Surehand
) -> None:
    task_id = str(http.post("/v1/tasks", json=TASK, headers=bearer("tok-pm")).json()["task_id"])
    claimed = http.post(
        f"/v1/tasks/{task_id}/transitions", json={"action": "claim"}, headers=bearer("tok-dev")
    )
    assert claimed.status_code == 200, claimed.text
    reported = http.post(
        f"/v1/tasks/{task_id}/reports",
        json={"body": "done", "reporter": "DEV"},
        headers=bearer("tok-admin"),
    )
    assert reported.status_code == 201, reported.text
    claim_event, report_event = sh.history(task_id)[1:]
    assert (claim_event.principal, claim_event.data) == (
        "dan",
        {"principal": "dan", "principal_role": "DEV"},
    )
    assert report_event.principal == "root"
    assert report_event.data["on_behalf_of"] == "DEV"
    assert report_event.data["principal"] == "root"


def test_the_python_door_acts_as_the_local_admin_and_records_it(store: Store) -> None:
    sh = Surehand(database_url=store.url, tenant="acme")
    try:
        assert (sh.principal.role, sh.principal.tenant) == ("ADMIN", "acme")
        task_id = str(sh.write_task(TASK).task_id)
        [created] = sh.history(task_id)
    finally:
        sh.close()
    assert created.data == {"on_behalf_of": "PM", "principal": "local", "principal_role": "ADMIN"}


def test_a_python_handle_with_a_narrower_principal_is_held_to_its_role(store: Store) -> None:
    dev = Surehand(database_url=store.url, principal=DEV)
    try:
        assert dev.tenant == "acme"
        with pytest.raises(Forbidden) as refused:
            dev.write_task({**TASK, "sender": "ADMIN"})
        assert refused.value.details["field"] == "sender"
        assert task_count(dev) == 0
        task_id = str(dev.write_task({**TASK, "sender": "DEV", "recipient": "DEV"}).task_id)
        with pytest.raises(Forbidden):
            dev.transition(task_id, Action.CLAIM, actor="QA")
        dev.transition(task_id, Action.CLAIM, actor="DEV")
        with pytest.raises(Forbidden):
            dev.write_report(task_id=task_id, reporter="QA", body="done")
        assert [event.action for event in dev.history(task_id)] == ["create", "claim"]
    finally:
        dev.close()


def test_acting_as_binds_the_principal_and_its_tenant(store: Store) -> None:
    base = Surehand(database_url=store.url, tenant="other")
    try:
        dev = base.acting_as(DEV)
        assert (dev.principal, dev.tenant, base.tenant) == (DEV, "acme", "other")
        assert dev.runtime is base.runtime  # a view, not a second store or broker
        with pytest.raises(Forbidden):
            dev.write_task(TASK)
    finally:
        base.close()


# -- finding 7: recover by the approver only; refusals do not grow the history ---------------


@pytest.mark.parametrize("actor", ["DEV", "QA"])
def test_recover_by_a_non_approver_is_not_authorized_and_records_nothing(
    rig: Rig, actor: str
) -> None:
    task_id, session = rig.interrupted()
    rig.clock.advance(GRACE_SECONDS * 10)
    before = rig.events(task_id)

    for _ in range(5):
        with pytest.raises(NotAuthorized):
            rig.sh.recover(task_id, actor=actor)

    assert rig.events(task_id) == before
    assert rig.cases_of(task_id) == []
    assert rig.attempt(session.attempt.attempt_id).state is AttemptState.RUNNING


def test_recover_over_http_by_a_dev_token_is_403_and_records_nothing(token_rig: Rig) -> None:
    task_id, _ = token_rig.interrupted()
    token_rig.lose(task_id)
    before = token_rig.events(task_id)
    with TestClient(create_app(token_rig.sh), base_url="http://127.0.0.1") as client:
        for _ in range(3):
            response = client.post(f"/v1/tasks/{task_id}/recover", headers=bearer("tok-dev"))
            assert response.status_code == 403, response.text
    assert token_rig.events(task_id) == before


def test_recover_from_the_cli_by_a_worker_role_is_refused(rig: Rig) -> None:
    task_id, _ = rig.interrupted()
    before = rig.events(task_id)
    result = CliRunner().invoke(
        cli_app,
        ["recover", task_id, "--actor", "DEV", "--json", "--database-url", rig.store.url],
        env={"SUREHAND_REDIS_NAMESPACE": rig.sh.settings.redis_namespace},
    )
    assert result.exit_code == EXIT_REFUSED, result.output
    assert json.loads(result.stdout)["error"]["code"] == "not_authorized"
    assert rig.events(task_id) == before


def test_a_repeated_not_admitted_recover_is_recorded_once_per_caller_and_window(rig: Rig) -> None:
    task_id, session = rig.interrupted()
    rig.hold_lease(session)

    for _ in range(5):
        assert rig.sh.recover(task_id, actor="PM").reason.endswith("holds a live lease")
        rig.sh.recover(task_id, actor="ADMIN")
    assert [e.by for e in rig.events(task_id, EventKind.ADMISSION)] == ["PM", "ADMIN"]

    rig.clock.advance(REFUSAL_WINDOW.total_seconds() + 1)
    rig.hold_lease(session)
    for _ in range(3):
        rig.sh.recover(task_id, actor="PM")
    assert [e.by for e in rig.events(task_id, EventKind.ADMISSION)] == ["PM", "ADMIN", "PM"]


def test_refused_reviews_record_nothing(rig: Rig) -> None:
    task_id, _ = held_task(rig)
    case = rig.case_of(task_id)
    before = rig.events(task_id)
    for _ in range(5):
        with pytest.raises(NotAuthorized):
            rig.sh.review(case.case_id, effect="absent", note="looked", actor="DEV")
    assert rig.events(task_id) == before


@pytest.mark.parametrize(
    ("action", "actor", "error"),
    [
        (Action.APPROVE, "DEV", NotAuthorized),
        (Action.ARCHIVE, "PM", IllegalTransition),  # not from review
        (Action.CLAIM, "DEV", IllegalTransition),
    ],
)
def test_refused_transitions_never_append_events(
    sh: Surehand, action: Action, actor: str, error: type[Exception]
) -> None:
    task_id = str(sh.write_task(TASK).task_id)
    sh.transition(task_id, Action.CLAIM, actor="DEV")
    sh.write_report(task_id=task_id, reporter="DEV", body="done")
    sh.transition(task_id, Action.SUBMIT, actor="DEV")
    before = sh.history(task_id)
    for _ in range(10):
        with pytest.raises(error):
            sh.transition(task_id, action, actor=actor, reason="again")
    assert sh.history(task_id) == before


def test_refused_http_moves_do_not_grow_the_history(http: TestClient, sh: Surehand) -> None:
    task_id = str(http.post("/v1/tasks", json=TASK, headers=bearer("tok-pm")).json()["task_id"])
    before = sh.history(task_id)
    answers: list[Any] = []
    for _ in range(10):
        answer = http.post(
            f"/v1/tasks/{task_id}/transitions",
            json={"action": "approve"},
            headers=bearer("tok-dev"),
        )
        answers.append(answer.status_code)
    assert set(answers) == {409}  # inbox -> approve is not a move at all
    for _ in range(5):
        answer = http.post(
            f"/v1/tasks/{task_id}/transitions",
            json={"action": "claim", "actor": "PM"},
            headers=bearer("tok-dev"),
        )
        assert answer.status_code == 403
    assert sh.history(task_id) == before


def test_a_narrow_handle_moved_to_another_tenant_never_becomes_admin(store: Store) -> None:
    with pytest.raises(ConfigError):
        Surehand(database_url=store.url, tenant="globex", principal=DEV)
    dev = Surehand(database_url=store.url, principal=DEV)
    try:
        moved = dev.for_tenant("globex")
        assert (moved.tenant, moved.principal.role) == ("globex", "DEV")
        with pytest.raises(Forbidden):
            moved.write_task(TASK)
    finally:
        dev.close()
