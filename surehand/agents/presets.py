"""What the command agent runs: any program, or a preset for a common LLM agent CLI.

``SUREHAND_COMMAND_AGENT=claude`` or ``codex`` (or the path of such a CLI,
``/opt/agents/bin/claude``; optionally followed by more arguments for the CLI) runs that agent
CLI non-interactively on the session's ``TASK.md``, connected to the
session MCP server, with its final message captured as the REPORT. Anything else is a program
line, split like a shell would (``shlex``), run as it is.

The session directory gets ``.mcp.json`` (Claude Code's format; the token comes from the
environment, never the file). Codex reads no project-local config of an untrusted directory,
so its preset passes everything by ``-c`` overrides, and its home (``CODEX_HOME``) is the
session's. The presets were run against Claude Code 2.1.332 and Codex 0.171.0 with scripted
model doubles (``tests/agents/test_agent_clis_real.py``).

A preset can do real work (:class:`PresetOptions`, from the settings): the operator's extra
tools for Claude Code (``SUREHAND_CLAUDE_TOOLS``: ``Bash``, ``Edit``, ``mcp__github``...) and
their own MCP servers (``SUREHAND_CLAUDE_MCP_CONFIG``), Codex's sandbox mode
(``SUREHAND_CODEX_SANDBOX``), and a workspace, the repository the agent works in
(``SUREHAND_AGENT_WORKSPACE``: ``--add-dir`` for Claude Code, ``-C`` for Codex). Claude Code's
tool calls are journaled by ``http`` hooks to the session server
(:mod:`surehand.agents.claude_hook`, :mod:`surehand.mcp.session_hooks`). Claude Code reads no
settings file but the preset's own (``--setting-sources=``): the session directory is its
working directory and home, and a ``.claude/settings.json`` the agent writes there could
otherwise drop the hooks (``disableAllHooks``, live, mid-session) or allow it a tool.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surehand.agents.claude_hook import DEFAULT_EFFECTFUL, HookPolicy
from surehand.agents.git_rules import DEFAULT_REMOTES
from surehand.errors import ConfigError

SERVER_NAME = "surehand"
URL_ENV = "SUREHAND_MCP_URL"
TOKEN_ENV = "SUREHAND_MCP_TOKEN"
LAST_MESSAGE = "last-message.txt"
PRESETS = ("claude", "codex")
HOOK_EVENTS = {"PreToolUse": "pre", "PostToolUse": "post", "PostToolUseFailure": "failure"}
# Claude Code then refuses run_in_background and never moves a running command to the
# background itself: a journaled command's outcome is recorded when it has ended.
CLAUDE_ENV = {"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"}
READ_ONLY_RETIRED = (
    "SUREHAND_CLAUDE_READ_ONLY_COMMANDS is retired: no Bash command can be exempt from the "
    "journal (every one first runs a shell setup the agent can rewrite, and git runs filters, "
    "diff drivers and hooks from repository config it can write); unset it: every Bash "
    "command is journaled"
)
CODEX_SANDBOXES = ("auto", "read-only", "workspace-write", "danger-full-access")

AGENT_PROMPT = """\
You are working on the TASK described in TASK.md in the session directory. surehand runs this
session and must know every side effect you cause, so that after an interruption nothing is
done twice. Use the surehand MCP tools:
1. Call recovery_brief() first. Never repeat an effect it lists as done or confirmed_present.
2. Before EVERY side effect outside this directory (opening a pull request, sending a message,
   creating a ticket, deploying, paying, writing to another system), call
   effect_begin(name, args) with a stable name and the arguments that identify the effect.
   If it answers already_done, do NOT do the effect: use the recorded outcome.
3. Right after the effect, call effect_end(operation_id, outcome="succeeded" or "failed",
   receipt=<the external id or URL it produced>).
4. Use progress(note) for long work. Your final message is your REPORT: say what you did,
   with the receipts.
5. To hand part of the work to another role, call delegate(recipient, subject, body, key):
   it creates that child TASK once; "reused" means an earlier attempt created it already.
If a tool answers stale_owner or lease_lost, stop at once: another attempt owns the TASK.
"""


@dataclass(frozen=True)
class PresetOptions:
    """What an operator lets a preset do (settings; the defaults: the session tools only)."""

    claude_tools: tuple[str, ...] = ()
    claude_mcp_configs: tuple[str, ...] = ()
    claude_hooks: bool = True
    effectful: tuple[str, ...] = DEFAULT_EFFECTFUL
    read_only_commands: tuple[str, ...] = ()  # retired: a value is a ConfigError
    codex_sandbox: str = "auto"
    hook_timeout: int = 60  # seconds Claude Code waits for a hook's answer

    def __post_init__(self) -> None:
        if self.codex_sandbox not in CODEX_SANDBOXES:
            raise ConfigError(
                f"SUREHAND_CODEX_SANDBOX={self.codex_sandbox!r}: choose one of "
                f"{', '.join(CODEX_SANDBOXES)}",
                setting="SUREHAND_CODEX_SANDBOX",
            )
        if self.read_only_commands:
            raise ConfigError(READ_ONLY_RETIRED, setting="SUREHAND_CLAUDE_READ_ONLY_COMMANDS")

    @property
    def claude_allowed(self) -> tuple[str, ...]:
        """The tools Claude Code may use: the session's own and the operator's."""
        return (f"mcp__{SERVER_NAME}", *self.claude_tools)

    def hook_policy(self, git_remotes: Sequence[str] = DEFAULT_REMOTES) -> HookPolicy | None:
        """What the claude preset's hooks decide by (None without hooks); ``git_remotes``:
        the remotes a scoped ``git push`` rule may push to."""
        if not self.claude_hooks:
            return None
        return HookPolicy(self.effectful, self.claude_allowed, tuple(git_remotes))


@dataclass(frozen=True)
class Invocation:
    """One session's side of the command line: its directory, server URL and workspace."""

    session_dir: Path
    mcp_url: str | None
    workspace: Path | None = None
    sandboxed: bool = False  # in surehand's bubblewrap sandbox
    budget_usd: float | None = None  # what the TASK may still spend (claude: --max-budget-usd)

    @property
    def task_file(self) -> Path:
        return self.session_dir / "TASK.md"


@dataclass(frozen=True)
class Program:
    """The program of a command agent: its argv for one session and where its REPORT is."""

    preset: str | None
    base: Sequence[str]
    report_file: str | None = None
    options: PresetOptions = field(default_factory=PresetOptions)

    def argv(self, session: Invocation) -> list[str]:
        """The command line for one session."""
        if self.preset == "claude":
            return claude_argv(self.base, session, self.options)
        if self.preset == "codex":
            return codex_argv(self.base, session, self.options)
        return list(self.base)

    def hook_policy(self, git_remotes: Sequence[str] = DEFAULT_REMOTES) -> HookPolicy | None:
        """What this program's hooks decide by: the claude preset's (None for any other)."""
        return self.options.hook_policy(git_remotes) if self.preset == "claude" else None

    def env(self, session: Invocation) -> dict[str, str]:
        """Variables the preset's CLI needs besides the session's (Codex: its home; Claude
        Code: no background tasks)."""
        if self.preset == "codex":
            return {"CODEX_HOME": str(session.session_dir / "home" / ".codex")}
        if self.preset == "claude":
            return dict(CLAUDE_ENV)
        return {}


def program_for(line: str, options: PresetOptions | None = None) -> Program:
    """The program ``SUREHAND_COMMAND_AGENT`` names (ConfigError when it names none)."""
    argv = shlex.split(line)
    if not argv:
        raise ConfigError(
            "the command agent needs a program: set SUREHAND_COMMAND_AGENT (claude, codex, or "
            "a command line)",
            setting="SUREHAND_COMMAND_AGENT",
        )
    chosen = options or PresetOptions()
    name = Path(argv[0]).name  # a preset by name, or by the path of its CLI
    if name == "claude":
        return Program("claude", argv, options=chosen)
    if name == "codex":
        return Program("codex", argv, report_file=LAST_MESSAGE, options=chosen)
    return Program(None, argv)


def prompt_for(session: Invocation) -> str:
    """The user prompt: where the TASK is, and the workspace if there is one."""
    prompt = (
        f"Do the TASK in {session.task_file}, following the instructions about the surehand tools."
    )
    if session.workspace is not None:
        prompt += f" Work in the repository at {session.workspace}."
    return prompt


def claude_argv(base: Sequence[str], session: Invocation, options: PresetOptions) -> list[str]:
    """``claude -p PROMPT`` on the session's MCP config (the operator's servers in it), the
    session tools and the operator's allowed, hooks journaling its tool calls, no settings
    file but these (``--setting-sources=``: not the project's, local or user's), what the TASK
    may still spend (``--max-budget-usd``), and its result as JSON (its final message, cost
    and usage: :mod:`surehand.agents.accounting`)."""
    workspace = ["--add-dir", str(session.workspace)] if session.workspace else []
    budget = [] if session.budget_usd is None else ["--max-budget-usd", f"{session.budget_usd:.6f}"]
    hooks = []
    if options.claude_hooks and session.mcp_url is not None:
        settings = hook_settings(session.mcp_url, options.hook_timeout)
        hooks = ["--settings", json.dumps(settings)]
    return [
        base[0],
        "-p",
        prompt_for(session),
        "--append-system-prompt",
        AGENT_PROMPT,
        "--mcp-config",
        ".mcp.json",
        "--strict-mcp-config",
        "--allowedTools",
        ",".join(options.claude_allowed),
        *workspace,
        "--setting-sources=",
        *hooks,
        *budget,
        "--output-format",
        "json",
        *base[1:],
    ]


def codex_argv(base: Sequence[str], session: Invocation, options: PresetOptions) -> list[str]:
    """``codex exec`` with the session MCP server and the sandbox mode given by ``-c`` overrides
    (Codex ignores an untrusted directory's own config), run in the workspace if there is one,
    the final message written to ``last-message.txt`` in the session directory."""
    servers = []
    if session.mcp_url is not None:
        servers = [
            "-c",
            f"mcp_servers.{SERVER_NAME}.url={json.dumps(session.mcp_url)}",
            "-c",
            f"mcp_servers.{SERVER_NAME}.bearer_token_env_var={json.dumps(TOKEN_ENV)}",
        ]
    workspace = ["-C", str(session.workspace)] if session.workspace else []
    return [
        base[0],
        "exec",
        "--json",  # events on stdout, its token usage among them (the REPORT is the file)
        "--skip-git-repo-check",
        "--output-last-message",
        str(session.session_dir / LAST_MESSAGE),
        *workspace,
        "-c",
        f"sandbox_mode={json.dumps(codex_sandbox(options.codex_sandbox, session))}",
        *servers,
        *base[1:],
        f"{prompt_for(session)}\n\n{AGENT_PROMPT}",
    ]


def codex_sandbox(setting: str, session: Invocation) -> str:
    """Codex's own sandbox mode: ``auto`` is ``danger-full-access`` inside surehand's sandbox
    (which confines it already; Codex's cannot nest there), ``workspace-write`` outside it."""
    if setting != "auto":
        return setting
    return "danger-full-access" if session.sandboxed else "workspace-write"


def hook_settings(mcp_url: str, timeout: int) -> dict[str, Any]:
    """Claude Code settings whose hooks post every tool call to the session server
    (:mod:`surehand.mcp.session_hooks`), beside its MCP door: ``type: "http"`` with the
    session's token from the environment, an explicit ``timeout`` and ``onFailure: "block"``
    (no answer, an error status or a timeout blocks the call; Claude Code 2.1.332 checked)."""

    def hook(event: str) -> dict[str, Any]:
        return {
            "type": "http",
            "url": hook_url(mcp_url, event),
            "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"},
            "allowedEnvVars": [TOKEN_ENV],
            "timeout": timeout,
            "onFailure": "block",
        }

    return {
        "hooks": {
            name: [{"matcher": "*", "hooks": [hook(event)]}] for name, event in HOOK_EVENTS.items()
        }
    }


def hook_url(mcp_url: str, event: str) -> str:
    """``…/tasks/<id>/mcp`` → ``…/tasks/<id>/hooks/<event>``."""
    return f"{mcp_url.removesuffix('/mcp')}/hooks/{event}"


def mcp_configs(mcp_url: str, servers: dict[str, Any] | None = None) -> dict[str, str]:
    """``.mcp.json`` (Claude Code, Cursor and others) for the session directory, by name: it
    names the session MCP server, beside the operator's ``servers`` (:func:`operator_servers`);
    the token stays in the environment."""
    session = {
        "type": "http",
        "url": mcp_url,
        "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"},
    }
    claude = {"mcpServers": {**(servers or {}), SERVER_NAME: session}}
    return {".mcp.json": json.dumps(claude, indent=2) + "\n"}


def operator_servers(paths: Sequence[str]) -> dict[str, Any]:
    """The operator's MCP servers from ``SUREHAND_CLAUDE_MCP_CONFIG`` files (Claude Code's
    ``.mcp.json`` format), read once at worker start and written into every session's own
    ``.mcp.json``: a session then needs no path of the host (the sandbox hides ``/tmp`` and
    the surehand home), and the agent cannot edit the operator's file. ConfigError for a file
    that cannot be read, is not such a config, or names a server twice or ``surehand`` (the
    session's own server, whose tools the hooks never journal)."""
    servers: dict[str, Any] = {}
    for path in paths:
        for name, server in _servers_in(Path(path)).items():
            if name == SERVER_NAME or name in servers:
                why = "is the session server's name" if name == SERVER_NAME else "is named twice"
                raise _config_error(f"{path}: the server {name!r} {why}; rename it")
            servers[name] = server
    return servers


def _servers_in(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _config_error(f"{path}: cannot read it as JSON ({exc})") from exc
    servers = config.get("mcpServers") if isinstance(config, dict) else None
    if not isinstance(servers, dict) or not all(isinstance(v, dict) for v in servers.values()):
        raise _config_error(f'{path}: expected {{"mcpServers": {{"name": {{...}}}}}}')
    return servers


def _config_error(why: str) -> ConfigError:
    return ConfigError(f"SUREHAND_CLAUDE_MCP_CONFIG {why}", setting="SUREHAND_CLAUDE_MCP_CONFIG")
