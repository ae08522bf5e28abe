"""Delegation: a session creates child TASKs once, across its successors.

A PM agent delegates DEV and QA children (QA depends on DEV and waits for it); its successor,
whose predecessor's answer was lost, repeats the calls and gets ``reused`` with the same
children, creating none twice; a changed request under a used key is the typed conflict; N
concurrent identical calls make one child; a stale attempt delegates nothing; the successor's
brief lists the children with their buckets. The same through the session MCP tool.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from surehand.agents.briefing import brief_for
from surehand.agents.context import SessionContext, SessionPort
from surehand.agents.presets import TOKEN_ENV, URL_ENV
from surehand.cli import app
from surehand.dispatcher import actions, dispatch
from surehand.dispatcher.claims import claim
from surehand.dispatcher.delegation import delegate
from surehand.dispatcher.sessions import Session
from surehand.errors import SessionLimitReached, StaleOwner, ValidationFailed
from surehand.facade import Surehand
from surehand.fcop.render import render_recovery
from surehand.mcp.session_server import SessionMcp
from surehand.mcp.session_state import SessionBudget, SessionLimits
from surehand.mcp.session_tools import Grant
from surehand.model import Action, Admission, AttemptState, Bucket, EventKind, Task
from surehand.store import tasks
from tests.session_helpers import Harness, claimed, committed_task, events_of, read_task

DEV = {"recipient": "DEV", "subject": "Build the login fix", "body": "Fix it.", "key": "dev"}


def qa_after(dev_id: str) -> dict[str, Any]:
    return {"recipient": "QA", "subject": "Test the login fix", "key": "qa", "depends_on": [dev_id]}


def children_of(sh: Surehand, parent_id: str) -> list[Task]:
    with sh.store.snapshot() as connection:
        return tasks.children(connection, parent_id)


def pm_task(sh: Surehand) -> str:
    return committed_task(sh, sender="ADMIN", recipient="PM", subject="Ship the login fix")


def lose(sh: Surehand, session: Session) -> None:
    case = sh.recovery.lose(session.attempt, state=AttemptState.SESSION_LOST, by="test")
    assert case is not None
    assert case.admission is Admission.REEXECUTE


def test_a_pm_agent_delegates_dev_and_qa_and_qa_waits_until_dev_is_done(
    harness: Harness,
) -> None:
    sh = harness.surehand()
    answers: list[tuple[str, str]] = []

    def pm(ctx: SessionContext) -> str:
        dev = ctx.delegate("DEV", "Build the login fix", "Fix it.", key="dev")
        assert dev.task_id is not None
        qa = ctx.delegate("QA", "Test the login fix", key="qa", depends_on=[dev.task_id])
        assert qa.task_id is not None
        answers.extend([(dev.disposition.value, dev.task_id), (qa.disposition.value, qa.task_id)])
        return "delegated"

    sh.registry.register("PM", pm)
    sh.registry.register("DEV", lambda ctx: "built", review=True)
    parent = pm_task(sh)
    assert sh.run_session(parent).outcome == "settled"

    [(created_dev, dev_id), (created_qa, qa_id)] = answers
    assert (created_dev, created_qa) == ("created", "created")
    found = {child.task_id: child for child in children_of(sh, parent)}
    assert sorted(found) == sorted([dev_id, qa_id])
    dev, qa = found[dev_id], found[qa_id]
    for child in (dev, qa):
        assert (child.fields.sender, child.fields.parent, child.tenant) == ("PM", parent, "default")
        assert child.fields.thread_key == read_task(sh.store, parent).fields.thread_key
    assert qa.fields.depends_on == (dev_id,)
    assert dispatch.waiting_note(sh.services, qa) == f"waiting for {dev_id} (inbox)"
    assert claim(sh.services, qa_id, worker="eager", message_id=None) is None

    sh.run_session(dev_id)  # DEV settles for review; PM approves it
    assert read_task(sh.store, qa_id).bucket is Bucket.INBOX
    actions.transition(sh.services, dev_id, Action.APPROVE, tenant="default", actor="PM")
    assert claimed(sh.services, qa_id).task.bucket is Bucket.ACTIVE


def test_the_successor_of_a_pm_whose_answer_was_lost_reuses_the_children(
    harness: Harness,
) -> None:
    sh = harness.surehand()
    parent = pm_task(sh)
    first = claimed(sh.services, parent, worker="first")
    dev = delegate(first, DEV)  # committed; the answer is lost with the process
    lose(sh, first)

    successor = claimed(sh.services, parent, worker="second")
    brief = brief_for(sh.store, parent, successor.attempt).to_dict()
    [listed] = brief["children"]
    assert (listed["task_id"], listed["key"], listed["bucket"]) == (dev.task_id, "dev", "inbox")
    assert dev.task_id is not None
    assert f"- {dev.task_id} for DEV" in render_recovery(brief)

    again = delegate(successor, DEV)
    qa = delegate(successor, qa_after(dev.task_id))
    assert qa.task_id is not None

    assert (again.disposition.value, again.task_id) == ("reused", dev.task_id)
    assert qa.disposition.value == "created"
    assert sorted(c.task_id for c in children_of(sh, parent)) == sorted([dev.task_id, qa.task_id])


def test_a_changed_request_under_a_used_key_is_a_conflict_and_creates_nothing(
    harness: Harness,
) -> None:
    sh = harness.surehand()
    session = claimed(sh.services, pm_task(sh))
    delegate(session, DEV)

    changed = delegate(session, {**DEV, "body": "Rewrite the whole login."})

    assert changed.disposition.value == "conflict"
    assert changed.conflict is not None
    assert changed.conflict.code.value == "digest_mismatch"
    assert len(children_of(sh, session.task_id)) == 1


def test_without_a_key_the_request_is_its_own_key(harness: Harness) -> None:
    sh = harness.surehand()
    session = claimed(sh.services, pm_task(sh))
    plain = {k: v for k, v in DEV.items() if k != "key"}

    first, again = delegate(session, plain), delegate(session, plain)
    other = delegate(session, {**plain, "subject": "Another fix"})

    assert (first.disposition.value, again.disposition.value) == ("created", "reused")
    assert again.task_id == first.task_id
    assert other.disposition.value == "created"
    assert len(children_of(sh, session.task_id)) == 2


def test_a_stale_attempt_cannot_delegate(harness: Harness) -> None:
    sh = harness.surehand()
    parent = pm_task(sh)
    first = claimed(sh.services, parent, worker="first")
    lose(sh, first)
    claimed(sh.services, parent, worker="second")

    with pytest.raises(StaleOwner):
        delegate(first, DEV)

    assert children_of(sh, parent) == []
    [fenced] = events_of(sh.store, parent, EventKind.STALE_OWNER_FENCED)
    assert fenced.data["write"] == "delegate"


def test_a_fence_lost_between_the_check_and_the_commit_creates_nothing(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The creation itself commits in the session's fenced transaction: an attempt that loses
    its TASK after the first look creates no child."""
    sh = harness.surehand()
    parent = pm_task(sh)
    first = claimed(sh.services, parent, worker="first")
    from surehand.dispatcher import delegation

    real = delegation._check_siblings

    def taken_over(session: Session, depends_on: list[str]) -> None:
        real(session, depends_on)
        lose(sh, first)
        claimed(sh.services, parent, worker="second")

    monkeypatch.setattr(delegation, "_check_siblings", taken_over)
    with pytest.raises(StaleOwner):
        delegate(first, DEV)
    assert children_of(sh, parent) == []


@pytest.mark.parametrize("callers", [8, 64])
def test_concurrent_identical_delegates_make_one_child(harness: Harness, callers: int) -> None:
    sh = harness.surehand()
    session = claimed(sh.services, pm_task(sh))
    start = threading.Barrier(callers)

    def call(_: int) -> tuple[str, str | None]:
        start.wait()
        result = delegate(session, DEV)
        return result.disposition.value, result.task_id

    with ThreadPoolExecutor(callers) as pool:
        results = list(pool.map(call, range(callers)))

    assert sorted(d for d, _ in results) == ["created"] + ["reused"] * (callers - 1)
    assert len({task_id for _, task_id in results}) == 1
    assert len(children_of(sh, session.task_id)) == 1


def test_a_child_may_depend_only_on_its_siblings(harness: Harness) -> None:
    sh = harness.surehand()
    session = claimed(sh.services, pm_task(sh))
    stranger = committed_task(sh)

    with pytest.raises(ValidationFailed) as refused:
        delegate(session, qa_after(stranger))

    assert refused.value.field == "depends_on"
    assert children_of(sh, session.task_id) == []


def test_a_bad_key_or_recipient_is_refused_naming_the_field(harness: Harness) -> None:
    sh = harness.surehand()
    session = claimed(sh.services, pm_task(sh))
    for bad, field in (({"key": "has space"}, "key"), ({"recipient": "dev"}, "recipient")):
        with pytest.raises(ValidationFailed) as refused:
            delegate(session, {**DEV, **bad})
        assert refused.value.field == field
    assert children_of(sh, session.task_id) == []


# -- the session MCP tool --------------------------------------------------------------------


@pytest.fixture
def sh_and_mcp(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Surehand, SessionMcp]]:
    monkeypatch.setattr("surehand.dispatcher.sessions.STORE_RETRY_DELAYS", ())
    sh = harness.surehand()
    server = SessionMcp(sh.services)
    yield sh, server
    server.stop()


def granted(server: SessionMcp, session: Session) -> Grant:
    context = SessionContext(
        task=session.task,
        attempt=session.attempt,
        port=cast(SessionPort, None),
        cancelled=threading.Event(),
    )
    return server.grant(context)


async def _calls(grant: Grant, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    headers = {"Authorization": f"Bearer {grant.token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(grant.url, http_client=http)) as client,
    ):
        return [await client.call_tool(tool, args) for tool, args in calls]


def structured(result: Any) -> dict[str, Any]:
    data = result.structured_content
    assert isinstance(data, dict), result
    return data


def test_an_agent_delegates_over_mcp_once_and_its_successor_is_answered_reused(
    sh_and_mcp: tuple[Surehand, SessionMcp],
) -> None:
    sh, server = sh_and_mcp
    parent = pm_task(sh)
    first = claimed(sh.services, parent, worker="first")
    [created] = anyio.run(_calls, granted(server, first), [("delegate", DEV)])
    lose(sh, first)
    successor = granted(server, claimed(sh.services, parent, worker="second"))

    brief, again = anyio.run(_calls, successor, [("recovery_brief", {}), ("delegate", DEV)])

    assert structured(created)["disposition"] == "created"
    [child] = structured(brief)["children"]
    assert child["task_id"] == structured(created)["task_id"]
    assert structured(again)["disposition"] == "reused"
    assert structured(again)["task_id"] == child["task_id"]
    assert len(children_of(sh, parent)) == 1


def test_a_stale_attempts_delegate_over_mcp_is_refused_and_ends_its_session(
    sh_and_mcp: tuple[Surehand, SessionMcp],
) -> None:
    sh, server = sh_and_mcp
    parent = pm_task(sh)
    first = claimed(sh.services, parent, worker="first")
    grant = granted(server, first)
    lose(sh, first)

    [refused] = anyio.run(_calls, grant, [("delegate", DEV)])

    assert refused.is_error
    assert structured(refused)["error"]["code"] == "stale_owner"
    assert children_of(sh, parent) == []
    assert server.grants.get(grant.token) is None  # its token is revoked


def test_the_session_budget_bounds_delegation() -> None:
    budget = SessionBudget(SessionLimits(max_children=2))
    budget.spend("delegate", 10)
    budget.spend("delegate", 10)
    with pytest.raises(SessionLimitReached) as refused:
        budget.spend("delegate", 10)
    assert "SUREHAND_SESSION_TOOLS_MAX_CHILDREN" in refused.value.message
    budget.spend("report", 10)  # other calls go on


def test_a_session_past_its_children_budget_is_refused_over_mcp_and_goes_on(
    harness: Harness,
) -> None:
    sh = harness.surehand(session_tools_max_children=2)
    server = SessionMcp(sh.services)
    try:
        grant = granted(server, claimed(sh.services, pm_task(sh)))
        calls = [("delegate", {**DEV, "key": f"dev-{n}"}) for n in range(3)]
        first, second, third, brief = anyio.run(_calls, grant, [*calls, ("recovery_brief", {})])
    finally:
        server.stop()

    assert [structured(r)["disposition"] for r in (first, second)] == ["created", "created"]
    assert third.is_error
    refused = structured(third)["error"]
    assert refused["code"] == "session_limit"
    assert "SUREHAND_SESSION_TOOLS_MAX_CHILDREN" in refused["detail"]
    assert len(structured(brief)["children"]) == 2  # the session goes on


def test_surehand_delegate_in_a_command_agents_session_creates_once(
    sh_and_mcp: tuple[Surehand, SessionMcp],
) -> None:
    sh, server = sh_and_mcp
    grant = granted(server, claimed(sh.services, pm_task(sh)))
    env = {URL_ENV: grant.url, TOKEN_ENV: grant.token}
    argv = ["delegate", "--to", "DEV", "--subject", "Build the login fix", "--key", "dev"]

    first = CliRunner().invoke(app, argv, env=env)
    again = CliRunner().invoke(app, argv, env=env)

    assert first.exit_code == 0, first.output
    created, reused = json.loads(first.output), json.loads(again.output)
    assert (created["disposition"], reused["disposition"]) == ("created", "reused")
    assert reused["task_id"] == created["task_id"]
    assert reused["client_submission_id"] == f"delegate:{grant.task_id}:dev"


def test_delegation_is_bounded_in_depth(harness: Harness) -> None:
    sh = harness.surehand(delegation_max_depth=2)
    task_id = pm_task(sh)
    for generation in range(2):  # the PM's TASK delegates, and so does its child
        child = delegate(claimed(sh.services, task_id), {**DEV, "key": f"g{generation}"})
        assert child.task_id is not None
        task_id = child.task_id

    with pytest.raises(SessionLimitReached) as refused:
        delegate(claimed(sh.services, task_id), {**DEV, "key": "g2"})

    assert refused.value.limit == "delegation_max_depth"
    assert "SUREHAND_DELEGATION_MAX_DEPTH" in refused.value.message
    assert children_of(sh, task_id) == []
