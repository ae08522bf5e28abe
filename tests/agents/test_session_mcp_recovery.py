"""A successor's briefing after a review or a keyed admission, and an MCP agent acting on it:
the Recovery section of its TASK.md and ``recovery_brief()`` name what the records say, and the
effect runs where admission allows it, once."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from surehand.agents.command import CommandAgent
from surehand.model import Admission, Bucket, EffectFact, OperationState, RetryPolicy
from surehand.runtime import session_door
from tests.recovery_helpers import Rig

pytestmark = pytest.mark.slow

AGENT = Path(__file__).parents[1] / "mcp_agent.py"
TICKET = {"project": "OPS", "title": "Rotate the API keys"}


def agent_files(tmp_path: Path) -> Path:
    """Where the agent writes its ledger and briefs: not the rig's work directory (tmp_path),
    whose session directories agents never see."""
    files = tmp_path / "agent"
    files.mkdir(exist_ok=True)
    return files


def mcp_agent_for_dev(rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_TEST_DIR", str(agent_files(tmp_path)))
    line = f"{sys.executable} {AGENT} finish"
    update = {
        "command_agent": line,
        "agent_env": "AGENT_TEST_DIR,AGENT_TICKET_KEY",
        "agent_bind": f"{agent_files(tmp_path)},{AGENT}:ro",
    }
    rig.sh.agent("DEV")(
        CommandAgent.from_settings(rig.sh.settings.model_copy(update=update), session_door())
    )


def successor_files(rig: Rig, task_id: str, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """The successor's ``recovery_brief()`` answer and its TASK.md."""
    successor = rig.attempts(task_id)[-1]
    brief = json.loads((agent_files(tmp_path) / f"brief-{successor.number}.json").read_text())
    return brief, (tmp_path / successor.attempt_id / "TASK.md").read_text()


def test_a_review_absent_is_in_the_successors_briefing_and_the_effect_runs_once(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = rig.new_task()
    rig.intent(rig.claim(task_id), "ticket.create", args=TICKET)
    case = rig.lose(task_id)
    assert case.admission is Admission.HOLD_FOR_REVIEW
    mcp_agent_for_dev(rig, tmp_path, monkeypatch)
    rig.sh.review(case.case_id, effect="absent", note="no such ticket in OPS", actor="PM")

    outcome = rig.sh.run_session(task_id)

    assert outcome.outcome == "settled", outcome
    brief, task_file = successor_files(rig, task_id, tmp_path)
    [interruption] = brief["interruptions"]
    assert interruption["review"]["effect"] == "absent"
    assert interruption["review"]["note"] == "no such ticket in OPS"
    [effect] = brief["effects"]
    assert (effect["status"], effect["confirmed_by"]) == ("confirmed_absent", "review:PM")
    assert 'reviewed by `"PM"`: effect `"absent"` (`"no such ticket in OPS"`)' in task_file
    assert '**confirmed_absent**: `"ticket.create"`' in task_file
    assert (agent_files(tmp_path) / "ledger.txt").read_text().splitlines() == [
        "created Rotate the API keys (attempt 2)"
    ]
    assert rig.task(task_id).bucket is Bucket.REVIEW


def test_a_keyed_open_intent_is_briefed_as_repeat_with_key_and_settled_by_the_successor(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task_id = rig.new_task()
    rig.intent(
        rig.claim(task_id), "ticket.create", args=TICKET, key="k-7", policy=RetryPolicy.KEYED
    )
    case = rig.lose(task_id)
    assert (case.effect_fact, case.admission) == (EffectFact.SINGLE_VERIFIED, Admission.REEXECUTE)
    monkeypatch.setenv("AGENT_TICKET_KEY", "k-7")
    mcp_agent_for_dev(rig, tmp_path, monkeypatch)

    outcome = rig.sh.run_session(task_id)

    assert outcome.outcome == "settled", outcome
    brief, task_file = successor_files(rig, task_id, tmp_path)
    [effect] = brief["effects"]
    assert (effect["status"], effect["idempotency_key"]) == ("repeat_with_key", "k-7")
    assert '**repeat_with_key**: `"ticket.create"`' in task_file
    [op] = rig.operations(task_id)  # the one intent, settled by the successor it was bound to
    assert (op.state, op.external_receipt, op.epoch) == (OperationState.SUCCEEDED, "OPS-1", 2)
