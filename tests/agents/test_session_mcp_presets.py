"""Presets for agent CLIs (``SUREHAND_COMMAND_AGENT=claude`` / ``codex``): the command lines and
MCP config files they produce, and the final message captured as the REPORT. Stand-in
``claude`` and ``codex`` programs record what they were given; no LLM runs. Also the
"Recovery" section a successor's TASK.md gets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from surehand.agents.command import CommandAgent
from surehand.agents.presets import (
    AGENT_PROMPT,
    Invocation,
    PresetOptions,
    mcp_configs,
    operator_servers,
    program_for,
)
from surehand.errors import ConfigError
from surehand.fcop.render import render_recovery
from tests.session_helpers import Harness, attempts_of, committed_task, reports_of

URL = "http://127.0.0.1:4242/tasks/TASK-20260101-001/mcp"

# A stand-in CLI: records its argv, cwd and MCP env; prints noise, then its "final message";
# as codex, also writes the final message where --output-last-message says.
STAND_IN = """#!/bin/sh
python3 - "$@" <<'EOF'
import json, os, sys
args = sys.argv[1:]
record = {"argv": args, "cwd": os.getcwd(), "url": os.environ.get("SUREHAND_MCP_URL"),
          "token": bool(os.environ.get("SUREHAND_MCP_TOKEN")),
          "sandboxed": open("/proc/1/comm").read().strip() == "bwrap"}
open(os.environ["AGENT_TEST_RECORD"], "w").write(json.dumps(record))
if "--output-last-message" in args:
    path = args[args.index("--output-last-message") + 1]
    open(path, "w").write("final message from codex")
    print("codex progress noise")
else:
    print("final message from claude")
EOF
"""


SESSION = Invocation(Path("/srv/sessions/A-1"), URL)
PROMPT = (
    "Do the TASK in /srv/sessions/A-1/TASK.md, following the instructions about the surehand tools."
)


def test_claude_runs_print_mode_on_the_session_mcp_config_with_its_tools_allowed() -> None:
    program = program_for("claude --model sonnet", PresetOptions(claude_hooks=False))

    assert program.argv(SESSION) == [
        "claude",
        "-p",
        PROMPT,
        "--append-system-prompt",
        AGENT_PROMPT,
        "--mcp-config",
        ".mcp.json",
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__surehand",
        "--setting-sources=",  # no settings file the agent can write is read
        "--output-format",
        "json",  # its final message, cost and usage (surehand.agents.accounting)
        "--model",
        "sonnet",
    ]
    assert program.report_file is None  # the JSON's result is the final message
    assert program.env(SESSION) == {"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"}


def test_claude_gets_the_operators_tools_servers_workspace_and_the_journaling_hooks() -> None:
    options = PresetOptions(
        claude_tools=("Bash", "Edit", "mcp__github"), claude_mcp_configs=("/etc/agents/gh.json",)
    )
    session = Invocation(Path("/srv/sessions/A-1"), URL, workspace=Path("/srv/repo"))

    argv = program_for("claude", options).argv(session)

    assert argv[argv.index("--allowedTools") + 1] == "mcp__surehand,Bash,Edit,mcp__github"
    configs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--mcp-config"]
    assert configs == [".mcp.json"]  # the operator's servers are written into it
    assert argv[argv.index("--add-dir") + 1] == "/srv/repo"
    assert "Work in the repository at /srv/repo." in argv[2]
    hooks = json.loads(argv[argv.index("--settings") + 1])["hooks"]
    assert set(hooks) == {"PreToolUse", "PostToolUse", "PostToolUseFailure"}
    [pre] = hooks["PreToolUse"]
    assert pre["matcher"] == "*"
    # Straight to the session server, with the session's token: nothing in the sandbox to
    # kill, and no answer, an error or a timeout blocks the call.
    assert pre["hooks"] == [
        {
            "type": "http",
            "url": URL.removesuffix("/mcp") + "/hooks/pre",
            "headers": {"Authorization": "Bearer ${SUREHAND_MCP_TOKEN}"},
            "allowedEnvVars": ["SUREHAND_MCP_TOKEN"],
            "timeout": 60,
            "onFailure": "block",
        }
    ]
    assert hooks["PostToolUseFailure"][0]["hooks"][0]["url"].endswith("/hooks/failure")


def test_codex_runs_exec_with_the_server_and_sandbox_as_config_overrides_only() -> None:
    program = program_for("codex --full-auto")

    assert program.argv(SESSION) == [
        "codex",
        "exec",
        "--json",  # events on stdout, its token usage among them
        "--skip-git-repo-check",
        "--output-last-message",
        "/srv/sessions/A-1/last-message.txt",
        "-c",
        'sandbox_mode="workspace-write"',
        "-c",
        f'mcp_servers.surehand.url="{URL}"',
        "-c",
        'mcp_servers.surehand.bearer_token_env_var="SUREHAND_MCP_TOKEN"',
        "--full-auto",
        f"{PROMPT}\n\n{AGENT_PROMPT}",
    ]
    assert program.report_file == "last-message.txt"
    assert program.env(SESSION) == {"CODEX_HOME": "/srv/sessions/A-1/home/.codex"}


def test_codex_in_surehands_sandbox_leaves_its_own_off_and_runs_in_the_workspace() -> None:
    session = Invocation(Path("/s/A-1"), URL, workspace=Path("/srv/repo"), sandboxed=True)

    argv = program_for("codex").argv(session)

    assert argv[argv.index("-C") + 1] == "/srv/repo"
    assert 'sandbox_mode="danger-full-access"' in argv
    assert (
        program_for("codex", PresetOptions(codex_sandbox="read-only"))
        .argv(session)
        .count('sandbox_mode="read-only"')
        == 1
    )
    with pytest.raises(ConfigError, match="SUREHAND_CODEX_SANDBOX"):
        PresetOptions(codex_sandbox="yolo")


def test_any_other_program_runs_as_given_and_none_is_a_config_error() -> None:
    assert program_for("sh 'my agent.sh' --fast").argv(SESSION) == ["sh", "my agent.sh", "--fast"]
    with pytest.raises(ConfigError, match="SUREHAND_COMMAND_AGENT"):
        program_for("  ")


def test_the_mcp_config_file_names_the_server_and_leaves_the_token_in_the_environment() -> None:
    files = mcp_configs(URL)

    assert list(files) == [".mcp.json"]  # Codex ignores an untrusted directory's own config
    claude = json.loads(files[".mcp.json"])
    assert claude == {
        "mcpServers": {
            "surehand": {
                "type": "http",
                "url": URL,
                "headers": {"Authorization": "Bearer ${SUREHAND_MCP_TOKEN}"},
            }
        }
    }


def test_the_operators_servers_are_written_beside_the_session_server(tmp_path: Path) -> None:
    github = {"type": "http", "url": "https://gh.example/mcp", "headers": {"X": "${GH}"}}
    tickets = {"command": "/opt/tickets-mcp", "args": ["--stdio"]}
    (tmp_path / "gh.json").write_text(json.dumps({"mcpServers": {"github": github}}))
    (tmp_path / "t.json").write_text(json.dumps({"mcpServers": {"tickets": tickets}}))

    servers = operator_servers([str(tmp_path / "gh.json"), str(tmp_path / "t.json")])
    written = json.loads(mcp_configs(URL, servers)[".mcp.json"])["mcpServers"]

    assert list(written) == ["github", "tickets", "surehand"]
    assert (written["github"], written["tickets"]) == (github, tickets)
    assert written["surehand"]["url"] == URL


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "cannot read it"),
        ("{not json", "cannot read it as JSON"),
        ('{"servers": {}}', "expected"),
        ('{"mcpServers": {"surehand": {"command": "x"}}}', "the session server's name"),
        ('{"mcpServers": {"github": {"command": "x"}}}', "is named twice"),
    ],
)
def test_an_operators_mcp_config_that_would_not_work_is_a_config_error(
    tmp_path: Path, content: str | None, why: str
) -> None:
    (tmp_path / "first.json").write_text('{"mcpServers": {"github": {"command": "gh"}}}')
    config = tmp_path / "second.json"
    if content is not None:
        config.write_text(content)

    with pytest.raises(ConfigError, match="SUREHAND_CLAUDE_MCP_CONFIG") as refused:
        operator_servers([str(tmp_path / "first.json"), str(config)])
    assert why in str(refused.value)
    assert str(config) in str(refused.value)


@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_a_preset_session_gets_its_files_and_url_and_its_final_message_is_the_report(
    cli: str, harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / cli).write_text(STAND_IN, encoding="utf-8")
    (bin_dir / cli).chmod(0o755)
    record = tmp_path / "record.json"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AGENT_TEST_RECORD", str(record))
    sh = harness.surehand(
        agents="DEV=command",
        command_agent=cli,
        agent_env="AGENT_TEST_RECORD",
        agent_bind=str(tmp_path),
    )
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert outcome.outcome == "settled", outcome
    [report] = reports_of(sh.store, task_id)
    assert report.body == f"final message from {cli}"
    seen = json.loads(record.read_text())
    [attempt] = attempts_of(sh.store, task_id)
    work_dir = harness.work_dir / attempt.attempt_id
    assert seen["cwd"] == str(work_dir.resolve())
    assert seen["url"].endswith(f"/tasks/{task_id}/mcp")
    assert seen["token"]
    sh_agent = CommandAgent.from_settings(sh.settings)
    session = Invocation(work_dir.resolve(), seen["url"], sandboxed=seen["sandboxed"])
    assert seen["argv"] == sh_agent.program.argv(session)[1:]
    assert (work_dir / ".mcp.json").exists()
    assert not (work_dir / ".codex" / "config.toml").exists()


def test_the_recovery_section_lists_what_is_done_reviewed_and_open() -> None:
    facts = {
        "task_id": "TASK-20260101-001",
        "attempt": 3,
        "interruptions": [
            {"case_id": "CASE-1", "attempt": 1, "effect_fact": "unknown",
             "admission": "hold_for_review",
             "review": {"by": "PM", "effect": "absent", "note": "no ticket in Jira"}},
            {"case_id": "CASE-2", "attempt": 2, "effect_fact": "none_verified",
             "admission": "reexecute", "review": None},
        ],
        "effects": [
            {"operation_id": 1, "attempt": 1, "name": "ticket.create", "args": {"t": 1},
             "status": "confirmed_absent", "idempotency_key": None, "receipt": None,
             "confirmed_by": "review:PM", "error": None},
            {"operation_id": 2, "attempt": 2, "name": "ticket.create", "args": {"t": 1},
             "status": "done", "idempotency_key": "k", "receipt": "OPS-7",
             "confirmed_by": None, "error": None},
        ],
        "instruction": "Do not repeat an effect listed as done.",
    }  # fmt: skip

    section = render_recovery(facts)

    assert section.splitlines() == [
        "## Recovery",
        "",
        "This is attempt 3 at TASK-20260101-001. Earlier attempts were interrupted; "
        "surehand's records say:",
        "",
        '- attempt 1 (CASE-1): effect fact unknown, admission hold_for_review; reviewed by `"PM"`: '
        'effect `"absent"` (`"no ticket in Jira"`)',
        "- attempt 2 (CASE-2): effect fact none_verified, admission reexecute",
        "",
        "Effects declared by earlier attempts:",
        "",
        '- **confirmed_absent**: `"ticket.create"` `{"t": 1}` (operation 1, attempt 1, confirmed '
        'by `"review:PM"`)',
        '- **done**: `"ticket.create"` `{"t": 1}` (operation 2, attempt 2, idempotency key `"k"`, '
        'receipt `"OPS-7"`)',
        "",
        "**Do not repeat an effect listed as done.**",
    ]
