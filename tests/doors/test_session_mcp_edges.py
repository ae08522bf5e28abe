"""The session tools' edges (issue 19, item 4), through the official ``mcp`` client against the
real session server: a refused session is stopped and its token revoked, with the reason shown;
a stale attempt leaves one event however often it calls; ``effect_begin`` is idempotent within
an attempt; an agent that returns with an effect still open is held; the port range is a
setting; the session server has a name of its own."""

from __future__ import annotations

import socket
import threading
from typing import Any, cast

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from surehand.agents import presets
from surehand.agents.claude_hook import SESSION_TOOLS
from surehand.agents.context import SessionContext, SessionPort
from surehand.dispatcher.sessions import Session
from surehand.errors import ConfigError
from surehand.facade import Surehand
from surehand.mcp.session_server import SERVER_NAME, SessionMcp, ports_of
from surehand.mcp.session_tools import Grant
from surehand.mcp.tools import build_server
from surehand.model import Admission, AttemptState, Bucket, EffectFact, EventKind, OperationState
from tests.session_helpers import (
    Harness,
    attempts_of,
    claimed,
    committed_task,
    events_of,
    operations_of,
    read_task,
    reports_of,
)

TICKET = {"project": "OPS", "title": "Rotate the API keys"}
BEGIN = {"name": "ticket.create", "args": TICKET}


async def _calls(grant: Grant, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    headers = {"Authorization": f"Bearer {grant.token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(grant.url, http_client=http)) as client,
    ):
        return [await client.call_tool(tool, args) for tool, args in calls]


def call(grant: Grant, tool: str, args: dict[str, Any]) -> Any:
    [result] = anyio.run(_calls, grant, [(tool, args)])
    return result


def refusal(grant: Grant) -> str:
    """What the official client shows for a call with ``grant``'s token (it must be refused)."""
    with pytest.raises(Exception) as raised:  # noqa: PT011  (an MCPError, maybe in a group)
        call(grant, "recovery_brief", {})
    shown = [str(e) for e in _flat(raised.value) if isinstance(e, MCPError)]
    assert shown, raised.value
    return shown[0]


def _flat(error: BaseException) -> list[BaseException]:
    inner = getattr(error, "exceptions", ())
    return [error, *(found for e in inner for found in _flat(e))]


def data(result: Any) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict), result
    return cast(dict[str, Any], result.structured_content)


def granted(mcp: SessionMcp, session: Session) -> tuple[Grant, SessionContext]:
    ctx = SessionContext(
        task=session.task,
        attempt=session.attempt,
        port=cast(SessionPort, None),
        cancelled=threading.Event(),
    )
    return mcp.grant(ctx), ctx


# -- 1 and 5: a refused session is stopped, its token revoked, and the reason is shown ------


def test_a_stale_owner_answer_stops_the_session_and_revokes_its_token_with_the_reason(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    session = claimed(harness_sh.services, committed_task(harness_sh))
    grant, ctx = granted(mcp, session)
    session.fail(RuntimeError("the agent raised"))  # attempt 1 no longer owns the TASK

    refused = call(grant, "effect_begin", BEGIN)

    assert data(refused)["error"]["code"] == "stale_owner"
    assert ctx.cancelled  # the command agent stops the program's process group on this
    assert ctx.stopped is not None
    assert ctx.stopped[0] == "stale_owner"
    shown = refusal(grant)
    assert "stale_owner" in shown
    assert "its token is revoked and its program stopped" in shown


def test_a_lease_lost_answer_stops_the_session_and_revokes_its_token(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant, ctx = granted(mcp, claimed(harness_sh.services, task_id))
    ctx.interrupt()  # what the heartbeat does when the lease cannot be renewed

    refused = call(grant, "report", {"body": "done"})

    assert data(refused)["error"]["code"] == "lease_lost"
    assert ctx.stopped is not None
    assert ctx.stopped[0] == "lease_lost"
    assert "lease_lost" in refusal(grant)
    assert reports_of(harness_sh.store, task_id) == []


def test_the_official_client_shows_why_a_token_of_an_ended_session_is_refused(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    grant, _ = granted(mcp, claimed(harness_sh.services, committed_task(harness_sh)))
    mcp.revoke(grant)  # the session ended

    assert "this token's session has ended" in refusal(grant)


def test_the_official_client_shows_why_a_token_is_refused_on_another_tasks_url(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    grant_a, _ = granted(mcp, claimed(harness_sh.services, committed_task(harness_sh)))
    grant_b, _ = granted(mcp, claimed(harness_sh.services, committed_task(harness_sh)))
    crossed = Grant(grant_a.token, grant_b.url, grant_a.session, lambda: False)

    assert f"this token acts on {grant_a.task_id} only" in refusal(crossed)


# -- 2: a stale attempt leaves one event, however often it calls -----------------------------


def test_concurrent_refused_writes_of_a_stale_attempt_leave_one_event(harness_sh: Surehand) -> None:
    task_id = committed_task(harness_sh)
    session = claimed(harness_sh.services, task_id)
    session.fail(RuntimeError("the agent raised"))
    refused: list[str] = []

    def write(n: int) -> None:
        try:
            session.report(f"note {n}", status=cast(Any, "in_progress"), submission_id=None)
        except Exception as error:  # StaleOwner, every time
            refused.append(type(error).__name__)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert refused == ["StaleOwner"] * 8
    [fenced] = events_of(harness_sh.store, task_id, EventKind.STALE_OWNER_FENCED)
    assert (fenced.attempt_id, fenced.data["write"]) == (session.attempt.attempt_id, "report")


def test_a_stale_agent_calling_again_and_again_over_mcp_leaves_one_event(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    session = claimed(harness_sh.services, task_id)
    session.fail(RuntimeError("the agent raised"))
    grants = [granted(mcp, session)[0] for _ in range(5)]  # as if it had five tokens

    answers = [data(call(grant, "effect_begin", BEGIN))["error"]["code"] for grant in grants]

    assert answers == ["stale_owner"] * 5
    assert len(events_of(harness_sh.store, task_id, EventKind.STALE_OWNER_FENCED)) == 1


# -- 3: effect_begin is idempotent within an attempt -----------------------------------------


def test_effect_begin_twice_in_one_attempt_answers_the_same_operation(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant, _ = granted(mcp, claimed(harness_sh.services, task_id))

    first, again = anyio.run(_calls, grant, [("effect_begin", BEGIN), ("effect_begin", BEGIN)])

    assert data(first)["status"] == data(again)["status"] == "begun"
    assert data(again)["operation_id"] == data(first)["operation_id"]
    [op] = operations_of(harness_sh.store, task_id)
    assert op.state is OperationState.INTENT


def test_concurrent_effect_begins_of_one_effect_in_one_attempt_get_one_operation(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant, _ = granted(mcp, claimed(harness_sh.services, task_id))
    ids: list[int] = []

    def begin() -> None:
        ids.append(data(call(grant, "effect_begin", BEGIN))["operation_id"])

    threads = [threading.Thread(target=begin) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    [op] = operations_of(harness_sh.store, task_id)
    assert ids == [op.operation_id] * 8


def test_the_same_effect_declared_under_another_key_in_one_attempt_is_refused(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant, _ = granted(mcp, claimed(harness_sh.services, task_id))
    keyed = {**BEGIN, "idempotency_key": "k1", "retry_policy": "keyed"}
    other_key = {**keyed, "idempotency_key": "k2"}

    first, refused = anyio.run(
        _calls, grant, [("effect_begin", keyed), ("effect_begin", other_key)]
    )

    assert data(first)["status"] == "begun"
    error = data(refused)["error"]
    assert "already begun in this attempt" in error["detail"]
    assert "'k1'" in error["detail"]
    [op] = operations_of(harness_sh.store, task_id)
    assert op.idempotency_key == "k1"


def test_the_same_name_with_other_args_is_another_effect(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant, _ = granted(mcp, claimed(harness_sh.services, task_id))
    other = {"name": "ticket.create", "args": {**TICKET, "title": "Rotate the DB password"}}

    first, second = anyio.run(_calls, grant, [("effect_begin", BEGIN), ("effect_begin", other)])

    assert data(first)["operation_id"] != data(second)["operation_id"]
    assert [op.state for op in operations_of(harness_sh.store, task_id)] == [
        OperationState.INTENT
    ] * 2


# -- 4: an agent that returns with an effect still open is held ------------------------------


def test_an_agent_that_returns_with_an_effect_still_open_is_held_with_a_case_naming_it(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    def forgets_effect_end(ctx: SessionContext) -> str:
        grant = mcp.grant(ctx)  # what the command agent hands its program
        try:
            begun = data(call(grant, "effect_begin", BEGIN))
        finally:
            mcp.revoke(grant)
        return f"created the ticket (operation {begun['operation_id']})"

    harness_sh.registry.register("DEV", forgets_effect_end)
    task_id = committed_task(harness_sh)

    outcome = harness_sh.run_session(task_id)
    harness_sh.reconcile()

    assert outcome.outcome == "failed", outcome
    [op] = operations_of(harness_sh.store, task_id)
    assert op.state is OperationState.INTENT
    [attempt] = attempts_of(harness_sh.store, task_id)
    assert attempt.state is AttemptState.FAILED
    assert attempt.agent_returned  # its result is kept: a review "present" reports from it
    [case] = harness_sh.cases()
    assert (case.effect_fact, case.admission) == (EffectFact.UNKNOWN, Admission.HOLD_FOR_REVIEW)
    assert [o["operation_id"] for o in case.effect_refs["operations"]] == [op.operation_id]
    assert f"operation {op.operation_id} 'ticket.create'" in case.effect_refs["why"]
    task = read_task(harness_sh.store, task_id)
    assert (task.bucket, task.hold is not None) == (Bucket.ACTIVE, True)
    assert reports_of(harness_sh.store, task_id) == []

    reviewed = harness_sh.review(case.case_id, effect="present", note="OPS-9 exists", actor="PM")

    assert reviewed.admission is Admission.RECONCILE_ONLY
    [report] = reports_of(harness_sh.store, task_id)
    assert f"created the ticket (operation {op.operation_id})" in report.body
    assert read_task(harness_sh.store, task_id).bucket is Bucket.REVIEW


# -- 6: the port range is a setting ----------------------------------------------------------


def free_ports(count: int) -> range:
    """``count`` consecutive ports nothing listens on now (searched from a high base)."""
    for base in range(42000, 60000, count):
        ports = range(base, base + count)
        try:
            for port in ports:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return ports
    raise AssertionError("no free port range on this host")


def test_the_session_server_listens_inside_its_port_range(harness: Harness) -> None:
    ports = free_ports(3)
    with socket.socket() as taken:  # the first is taken: it moves on to the next
        taken.bind(("127.0.0.1", ports[0]))
        taken.listen()
        harness_sh = harness.surehand(session_mcp_ports=f"{ports[0]}-{ports[-1]}")
        server = SessionMcp(harness_sh.services)
        try:
            port, _ = server.door()
        finally:
            server.stop()

    assert port == ports[1]


def test_an_exhausted_port_range_is_a_clear_error_naming_the_setting(harness: Harness) -> None:
    ports = free_ports(2)
    holders = [socket.socket() for _ in ports]
    try:
        for holder, port in zip(holders, ports, strict=True):
            holder.bind(("127.0.0.1", port))
            holder.listen()
        server = SessionMcp(harness.surehand(session_mcp_ports=f"{ports[0]}-{ports[1]}").services)
        with pytest.raises(ConfigError) as raised:
            server.door()
    finally:
        for holder in holders:
            holder.close()

    assert raised.value.details["setting"] == "SUREHAND_SESSION_MCP_PORTS"
    assert f"no free port on 127.0.0.1 in SUREHAND_SESSION_MCP_PORTS={ports[0]}-" in str(
        raised.value
    )


@pytest.mark.parametrize("text", ["9-3", "0-10", "70000"])
def test_a_port_range_that_is_no_range_is_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="is no port range"):
        ports_of(text)


# -- 7: distinct server names ----------------------------------------------------------------


async def _server_name(grant: Grant) -> str:
    headers = {"Authorization": f"Bearer {grant.token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(grant.url, http_client=http)) as client,
    ):
        info = client.server_info
        assert info is not None
        return str(info.name)


def test_the_session_server_and_the_operators_server_have_distinct_names(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    grant, _ = granted(mcp, claimed(harness_sh.services, committed_task(harness_sh)))

    assert anyio.run(_server_name, grant) == SERVER_NAME == "surehand-session"
    assert build_server(harness_sh).name == "surehand"
    # Agent CLIs name the tools after the configuration's key, which did not change.
    assert SESSION_TOOLS == f"mcp__{presets.SERVER_NAME}__" == "mcp__surehand__"
