"""Presets that can do real work: what they need is checked at start, the session tools carry
the annotations Codex needs to run them, and the Claude Code hooks choose which calls to
journal and block a call whenever they cannot journal it."""

# ruff: noqa: F811  (test functions take the fixtures imported below)

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import anyio
import pytest

from surehand.agents import claude_hook
from surehand.agents.command import CommandAgent
from surehand.cli.check_command import check_agent_programs
from surehand.errors import ConfigError
from surehand.mcp.session_server import build_session_server
from surehand.mcp.session_tools import SessionTools
from surehand.runtime import session_door
from tests.session_helpers import Harness, harness  # noqa: F401  (harness fixture)
from tests.test_misconfig import UNUSED_REDIS, store_url, surehand  # noqa: F401  (fixture)

EFFECTFUL = ("Bash", "WebFetch", "mcp__*")


def test_a_preset_without_the_mcp_extra_stops_the_worker_at_start_and_check_says_so(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "surehand.mcp.session_server", None)  # as if not installed
    settings = harness.settings(agents="DEV=command", command_agent="claude")

    with pytest.raises(ConfigError, match=r"surehand\[mcp\]"):
        CommandAgent.from_settings(settings, session_door()).require_ready()
    [preset] = [c for c in check_agent_programs(settings) if c.name == "agent preset"]
    assert preset.status == "fail"
    assert "mcp extra" in preset.detail


def test_a_preset_whose_cli_is_not_on_path_stops_the_worker_at_start(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    settings = harness.settings(agents="DEV=command", command_agent="codex")

    with pytest.raises(ConfigError, match="'codex', which is not on PATH"):
        CommandAgent.from_settings(settings, session_door()).require_ready()
    [preset] = [c for c in check_agent_programs(settings) if c.name == "agent preset"]
    assert preset.status == "fail"
    assert "not on PATH" in preset.detail


def test_an_operators_mcp_config_naming_the_session_server_fails_the_start_and_check(
    harness: Harness, tmp_path: Path
) -> None:
    config = tmp_path / "mine.mcp.json"
    config.write_text('{"mcpServers": {"surehand": {"command": "my-operator-server"}}}')
    settings = harness.settings(
        agents="DEV=command", command_agent="claude", claude_mcp_config=str(config)
    )

    with pytest.raises(ConfigError, match="the session server's name"):
        CommandAgent.from_settings(settings, session_door()).require_ready()
    [preset] = [c for c in check_agent_programs(settings) if c.name == "agent preset"]
    assert preset.status == "fail"
    assert "SUREHAND_CLAUDE_MCP_CONFIG" in preset.detail


def test_a_worker_whose_preset_cli_is_missing_refuses_to_start_and_says_why(
    tmp_path: Path, store_url: str
) -> None:
    refused = surehand(
        tmp_path,
        "worker",
        "--roles",
        "DEV",
        code=1,
        SUREHAND_DATABASE_URL=store_url,
        SUREHAND_BROKER_URL=UNUSED_REDIS,
        SUREHAND_REDIS_URL=UNUSED_REDIS,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT=str(tmp_path / "bin" / "claude"),
        SUREHAND_WORK_DIR=str(tmp_path / "sessions"),
    )

    assert "(config_error): the claude preset runs" in refused.stderr
    assert "which is not on PATH here" in refused.stderr


def test_codex_outside_surehands_sandbox_refuses_session_homes_in_the_temp_directory(
    harness: Harness,
) -> None:
    # Codex's own sandbox will not put its helpers in a CODEX_HOME under /tmp: every shell
    # command of the agent would fail.
    settings = harness.settings(agents="DEV=command", command_agent="codex", agent_sandbox="none")

    with pytest.raises(ConfigError, match="SUREHAND_WORK_DIR"):
        CommandAgent.from_settings(settings, session_door()).require_ready()


def test_a_workspace_that_is_not_a_directory_is_a_config_error(harness: Harness) -> None:
    settings = harness.settings(
        agents="DEV=command", command_agent="sh -c true", agent_workspace="relative/repo"
    )

    with pytest.raises(ConfigError, match="SUREHAND_AGENT_WORKSPACE"):
        CommandAgent.from_settings(settings, session_door()).require_ready()


def test_every_session_tool_carries_the_annotations_codex_needs_to_run_it() -> None:
    # Codex in exec mode refuses an MCP tool that is not read-only or non-destructive and
    # closed-world (tests/test_agent_clis_real.py runs the real one).
    server = build_session_server(SessionTools(lambda _token: None))

    tools = anyio.run(server.list_tools)

    assert {tool.name for tool in tools} == {
        "effect_begin",
        "effect_end",
        "report",
        "progress",
        "recovery_brief",
    }
    for tool in tools:
        hints = tool.annotations
        assert hints is not None, tool.name
        assert hints.open_world_hint is False, tool.name
        assert hints.read_only_hint is True or hints.destructive_hint is False, tool.name


@pytest.mark.parametrize(
    ("tool", "tool_input", "journaled"),
    [
        ("Bash", {"command": "git push origin main"}, True),
        ("Bash", {"command": "git status"}, False),
        ("Bash", {"command": "git status; curl -X POST https://x"}, True),
        ("Bash", {"command": "ls $(curl https://x)"}, True),
        ("mcp__github__create_pull_request", {"title": "x"}, True),
        ("mcp__surehand__effect_begin", {"name": "x", "args": {}}, False),
        ("Read", {"file_path": "/etc/hosts"}, False),
        ("WebFetch", {"url": "https://example.org"}, True),
    ],
)
def test_the_hooks_journal_effectful_calls_but_not_read_only_ones(
    tool: str, tool_input: dict[str, str], journaled: bool
) -> None:
    read_only = ("git status", "ls")

    assert claude_hook.is_effectful(tool, tool_input, EFFECTFUL, read_only) is journaled


def test_a_journaled_call_is_the_same_effect_whatever_the_agent_says_about_it() -> None:
    first = claude_hook.operation_of("Bash", {"command": "make deploy", "description": "ship"})
    again = claude_hook.operation_of("Bash", {"command": "make deploy", "description": "go"})

    assert (
        first
        == again
        == (
            "claude:Bash",
            {"undeclared": True, "tool": "Bash", "input": {"command": "make deploy"}},
        )
    )
    name, _ = claude_hook.operation_of("mcp__github__create_pull_request", {"title": "x"})
    assert name == "claude:mcp/github/create_pull_request"


def test_a_pre_hook_that_cannot_reach_its_session_blocks_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SUREHAND_MCP_URL", raising=False)
    monkeypatch.setenv("SUREHAND_SESSION_DIR", str(tmp_path))
    call = {"tool_name": "Bash", "tool_input": {"command": "git push"}, "tool_use_id": "t1"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(call)))

    status = claude_hook.main(["pre", "--effectful", "Bash", "--allowed", "Bash"])

    assert status == claude_hook.BLOCK
    assert "surehand could not journal this tool call" in capsys.readouterr().err


def test_a_pre_hook_given_garbage_blocks_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUREHAND_SESSION_DIR", str(tmp_path))
    monkeypatch.setattr("sys.stdin", io.StringIO("not json"))

    assert claude_hook.main(["pre", "--effectful", "Bash"]) == claude_hook.BLOCK


ALLOWED = ("mcp__surehand", "Bash(git push:*)", "Bash(make test)", "mcp__github", "Web*")


@pytest.mark.parametrize(
    ("tool", "tool_input", "mode", "permitted"),
    [
        ("Bash", {"command": "git push origin main"}, "default", True),
        ("Bash", {"command": "git push"}, "default", True),
        ("Bash", {"command": "git pushy"}, "default", False),
        ("Bash", {"command": "rm -rf build"}, "default", False),
        ("Bash", {"command": "git push; rm -rf build"}, "default", False),
        ("Bash", {"command": "make test"}, "default", True),
        ("Bash", {"command": "make test-all"}, "default", False),
        ("mcp__github__create_pull_request", {}, "default", True),
        ("mcp__slack__post_message", {}, "default", False),
        ("WebFetch", {"url": "https://x.example"}, "default", True),
        ("mcp__slack__post_message", {}, "bypassPermissions", True),
    ],
)
def test_the_hooks_permit_only_what_the_operators_rules_allow(
    tool: str, tool_input: dict[str, str], mode: str, permitted: bool
) -> None:
    assert claude_hook.permits(tool, tool_input, ALLOWED, mode) is permitted


@pytest.mark.parametrize(
    ("rule", "url", "permitted"),
    [
        ("WebFetch(domain:docs.example)", "https://docs.example/a", True),
        ("WebFetch(domain:docs.example)", "https://evil.example/docs.example", False),
        ("Bash(npm run *)", "", False),
    ],
)
def test_a_web_fetch_rule_permits_its_domain_only(rule: str, url: str, permitted: bool) -> None:
    assert claude_hook.permits("WebFetch", {"url": url}, (rule,), "default") is permitted


class Hook:
    """One run of the pre hook in process, its session server replaced by a recorder."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.calls: list[tuple[str, dict[str, object]]] = []
        monkeypatch.setenv("SUREHAND_SESSION_DIR", str(tmp_path))
        monkeypatch.setattr(claude_hook, "_call", self._record)

    def _record(self, tool: str, arguments: dict[str, object]) -> dict[str, object]:
        self.calls.append((tool, arguments))
        return {"status": "begun", "operation_id": 7}

    def pre(self, command: str, capsys: pytest.CaptureFixture[str], **extra: object) -> str:
        call = {"tool_name": "Bash", "tool_input": {"command": command, **extra}}
        self.monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(call | {"tool_use_id": "t"})))
        options = ["pre", "--effectful", "Bash", "--allowed", "Bash(git push:*)"]
        assert claude_hook.main(options) == 0
        decision = json.loads(capsys.readouterr().out)["hookSpecificOutput"]
        return f"{decision['permissionDecision']}: {decision['permissionDecisionReason']}"


def test_the_pre_hook_journals_then_allows_a_permitted_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = Hook(tmp_path, monkeypatch)

    decision = hook.pre("git push origin main", capsys)

    assert decision == "allow: surehand journaled it as operation 7"
    [(tool, arguments)] = hook.calls
    assert (tool, arguments["name"]) == ("effect_begin", "claude:Bash")


def test_the_pre_hook_denies_a_call_the_operator_did_not_permit_and_journals_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Left to Claude Code, the refusal would come after the intent was recorded, and a refused
    # call gets no after event: the intent would stay open and hold the TASK.
    hook = Hook(tmp_path, monkeypatch)

    decision = hook.pre("rm -rf build", capsys)

    assert decision.startswith("deny: surehand: Bash is not permitted in this session")
    assert hook.calls == []


def test_the_pre_hook_denies_a_background_command_it_could_not_see_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Claude Code answers a background command at once: the after event would record it
    # succeeded while it still runs.
    hook = Hook(tmp_path, monkeypatch)

    decision = hook.pre("git push origin main", capsys, run_in_background=True)

    assert decision.startswith("deny: surehand records this command's outcome when it ends")
    assert hook.calls == []
