"""Presets that can do real work: what they need is checked at start, and the session tools
carry the annotations Codex needs to run them (the Claude Code hooks' decisions:
tests/agents/test_claude_hook_decisions.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from surehand.agents.command import CommandAgent
from surehand.cli.agent_checks import check_agent_programs
from surehand.errors import ConfigError
from surehand.mcp.session_server import build_session_server
from surehand.mcp.session_tools import SessionTools
from surehand.runtime import session_door
from tests.session_helpers import Harness
from tests.shared.misconfig import UNUSED_REDIS, surehand


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
    # closed-world (tests/agents/test_agent_clis_real.py runs the real one).
    server = build_session_server(SessionTools(lambda _token: None))

    tools = anyio.run(server.list_tools)

    assert {tool.name for tool in tools} == {
        "effect_begin",
        "effect_end",
        "report",
        "progress",
        "delegate",
        "wait_for",
        "recovery_brief",
    }
    for tool in tools:
        hints = tool.annotations
        assert hints is not None, tool.name
        assert hints.open_world_hint is False, tool.name
        assert hints.read_only_hint is True or hints.destructive_hint is False, tool.name
