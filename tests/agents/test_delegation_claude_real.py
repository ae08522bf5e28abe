"""The real Claude Code (pinned, from npm) as a PM under a real ``surehand worker``, against a
scripted double of its model API: it reads its brief, delegates a DEV child through the
session tool ``delegate`` and ends its session with ``wait_for``; the worker slot and lease
are released while DEV runs (a Python agent in the same worker). Once DEV is approved, the PM
runs again, its brief lists DEV done with DEV's REPORT, and its final message (the REPORT)
quotes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket
from surehand.store import Store, tasks
from tests.agent_clis import AgentClis
from tests.delegation_agents import LEDGER_ENV
from tests.model_doubles import (
    AnthropicDouble,
    Call,
    Exchange,
    Final,
    Script,
    Step,
    StepFor,
    serving,
)
from tests.procs import RedisServer, running, start_worker, wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.shared.agent_clis import MODEL_HOST, claude_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TOOLS = ",".join(f"mcp__surehand__{t}" for t in ("recovery_brief", "delegate", "wait_for"))
DEV = {"recipient": "DEV", "subject": "Build the login fix", "body": "Fix it.", "key": "dev"}


def delegate_or_report(exchange: Exchange) -> Step:
    """After the brief: the children are done (a later attempt), report theirs; else delegate."""
    children = exchange.last_json().get("children") or []
    if children and all(child["bucket"] == "done" for child in children):
        return Final("; ".join(f"{c['recipient']} reported: {c['report']}" for c in children))
    return Call("mcp__surehand__delegate", DEV)


def test_claude_code_delegates_through_the_session_tool_and_waits(
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    clis: AgentClis,
    workspace: Path,
) -> None:
    steps: list[StepFor] = [
        Call("ToolSearch", {"query": f"select:{TOOLS}", "max_results": 5}),
        Call("mcp__surehand__recovery_brief", {}),
        delegate_or_report,
        Call("mcp__surehand__wait_for", {"children": []}),
    ]
    client = reconciling_client
    with serving(AnthropicDouble(Script(steps)), MODEL_HOST) as model:
        env = claude_env(store, broker, tmp_path, clis, model)
        env["SUREHAND_AGENTS"] = "PM=command,DEV=tests.delegation_agents:dev"
        env[LEDGER_ENV] = str(tmp_path / "ledger.jsonl")
        with running(start_worker(env, tmp_path / "worker.log", roles="PM,DEV")) as worker:
            created = client.write_task(
                sender="ADMIN", recipient="PM", subject="Ship the login fix", body="Delegate."
            )
            parent = created.task_id
            assert parent is not None

            def child() -> str | None:
                with store.snapshot() as connection:
                    found = tasks.children(connection, parent)
                return found[0].task_id if found else None

            def dev_in_review() -> bool:
                if worker.returncode is not None:
                    pytest.fail(f"the worker exited:\n{worker.output()[-3000:]}")
                dev = child()
                return dev is not None and read_task(store, dev).bucket is Bucket.REVIEW

            wait_until(dev_in_review, timeout=180, interval=0.5, what="DEV's REPORT")
            waiting = read_task(store, parent)
            assert (waiting.bucket, waiting.published) == (Bucket.INBOX, False)
            # No lease is held while it waits: released once the PM's session has ended (its
            # agent's processes stopped), which may come after DEV's quick REPORT; never before.
            wait_until(
                lambda: client.leases.holder(parent) is None,
                timeout=60,
                interval=0.2,
                what="the waiting PM session's lease to be released",
            )
            assert read_task(store, parent).bucket is Bucket.INBOX
            dev_id = child()
            assert dev_id is not None
            client.transition(dev_id, "approve", actor="PM")

            wait_until(
                lambda: read_task(store, parent).bucket is Bucket.REVIEW,
                timeout=180,
                interval=0.5,
                what="the PM's REPORT",
            )

    [report] = reports_of(store, parent)
    assert report.body == "DEV reported: built on branch fix-login"
    assert [a.state for a in attempts_of(store, parent)] == [
        AttemptState.SUCCEEDED,  # delegated and waited
        AttemptState.SUCCEEDED,  # resumed with DEV's REPORT
    ]
    with store.snapshot() as connection:
        assert len(tasks.children(connection, parent)) == 1
