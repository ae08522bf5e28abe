"""The real Claude Code under a real worker runs what the operator permits, journaled, and
nothing else: the hooks decide each effectful call themselves (allow after journaling, deny
otherwise), so no call they journaled can then be refused by Claude Code's own permission
check, which would leave its intent open and hold a TASK that did nothing wrong. The
operator's own MCP server (``SUREHAND_CLAUDE_MCP_CONFIG``) reaches the agent inside the
sandbox, and its tool calls are journaled like Bash."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import OperationState
from surehand.store import Store
from tests.agent_clis import AgentClis
from tests.model_doubles import AnthropicDouble, Call, Final, Script, StepFor, serving
from tests.procs import RedisServer, running, start_worker
from tests.session_helpers import operations_of, reports_of
from tests.shared.agent_clis import REPORT, claude_env, settled_by, submitted

pytestmark = pytest.mark.slow

TICKETS_SERVER = Path(__file__).parents[1].joinpath("tickets_mcp.py")


def tickets_config(tmp_path: Path, ledger: Path) -> Path:
    """The operator's MCP config: the tickets server over stdio."""
    server = {
        "command": sys.executable,
        "args": [str(TICKETS_SERVER)],
        "env": {"TICKETS_LEDGER": str(ledger)},
    }
    config = tmp_path / "tickets.mcp.json"
    config.write_text(json.dumps({"mcpServers": {"tickets": server}}))
    return config


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_claude_runs_what_the_operator_permits_journaled_and_is_denied_the_rest(
    sandbox: str,
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    clis: AgentClis,
    workspace: Path,
) -> None:
    tickets, deployed = tmp_path / "tickets.txt", workspace / "deployed"
    steps: list[StepFor] = [
        Call("ToolSearch", {"query": "select:mcp__tickets__open_ticket", "max_results": 5}),
        Call("mcp__tickets__open_ticket", {"title": "rotate keys"}),
        Call("Bash", {"command": f"touch {deployed}", "description": "deploy"}),
        Call("Bash", {"command": f"rm {workspace / 'README'}", "description": "not permitted"}),
        Call(
            "Bash",
            {
                "command": f"touch {workspace / 'bg'}",
                "description": "bg",
                "run_in_background": True,
            },
        ),
        Final(REPORT),
    ]
    with serving(AnthropicDouble(Script(steps))) as model:
        env = claude_env(store, broker, tmp_path, clis, model, sandbox=sandbox)
        env["SUREHAND_CLAUDE_TOOLS"] = "mcp__tickets,Bash(touch:*)"
        env["SUREHAND_CLAUDE_MCP_CONFIG"] = str(tickets_config(tmp_path, tickets))
        env["SUREHAND_AGENT_BIND"] += f",{TICKETS_SERVER}:ro"  # the operator's server's file
        with running(start_worker(env, tmp_path / "worker.log")) as worker:
            task_id = submitted(reconciling_client)
            settled_by(reconciling_client, store, task_id, worker)

    # Settled for review, not held: every intent the hooks recorded was settled.
    [report] = reports_of(store, task_id)
    assert report.body == REPORT
    ticket, touch = operations_of(store, task_id)
    assert (ticket.name, ticket.state) == (
        "claude:mcp/tickets/open_ticket",
        OperationState.SUCCEEDED,
    )
    assert ticket.args["input"] == {"title": "rotate keys"}
    assert (touch.name, touch.state) == ("claude:Bash", OperationState.SUCCEEDED)
    assert tickets.read_text() == "rotate keys\n"
    assert deployed.exists()
    # Denied by the hook, with the reason the model reads; neither ran.
    assert (workspace / "README").exists()
    assert not (workspace / "bg").exists()
    results = json.dumps(model.requests[-1])
    assert "Bash is not permitted in this session" in results
    # Claude Code runs nothing in the background here (CLAUDE_CODE_DISABLE_BACKGROUND_TASKS):
    # it refuses the parameter before the hooks see the call.
    assert "unexpected parameter `run_in_background`" in results
