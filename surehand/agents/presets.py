"""What the command agent runs: any program, or a preset for a common LLM agent CLI.

``SUREHAND_COMMAND_AGENT=claude`` or ``codex`` (optionally followed by more arguments for the
CLI) runs that agent CLI non-interactively on the session's ``TASK.md``, connected to the
session MCP server, with its final message captured as the REPORT. Anything else is a program
line, split like a shell would (``shlex``), run as it is.

The session directory also gets the MCP config files the CLIs read, whatever the program:
``.mcp.json`` (Claude Code's format; the token comes from the environment, never the file) and
``.codex/config.toml`` (Codex's ``[mcp_servers.<name>]`` table). Flags were checked against the
documentation of Claude Code 2.x (``-p``, ``--mcp-config``, ``--strict-mcp-config``,
``--allowedTools``, ``--output-format``, ``--append-system-prompt``) and Codex CLI 0.14x
(``exec``, ``-c``, ``--skip-git-repo-check``, ``--output-last-message``); no LLM runs in
surehand's tests, which check the files and command lines produced.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from surehand.errors import ConfigError

SERVER_NAME = "surehand"
URL_ENV = "SUREHAND_MCP_URL"
TOKEN_ENV = "SUREHAND_MCP_TOKEN"
LAST_MESSAGE = "last-message.txt"

AGENT_PROMPT = """\
You are working on the TASK described in TASK.md in the current directory. surehand runs this
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
If a tool answers stale_owner or lease_lost, stop at once: another attempt owns the TASK.
"""


@dataclass(frozen=True)
class Program:
    """The program of a command agent: its argv for one session and where its REPORT is."""

    preset: str | None
    base: Sequence[str]
    report_file: str | None = None

    def argv(self, mcp_url: str | None) -> list[str]:
        """The command line for a session whose MCP server is at ``mcp_url`` (None: off)."""
        if self.preset == "claude":
            return claude_argv(self.base)
        if self.preset == "codex":
            return codex_argv(self.base, mcp_url)
        return list(self.base)


def program_for(line: str) -> Program:
    """The program ``SUREHAND_COMMAND_AGENT`` names (ConfigError when it names none)."""
    argv = shlex.split(line)
    if not argv:
        raise ConfigError(
            "the command agent needs a program: set SUREHAND_COMMAND_AGENT (claude, codex, or "
            "a command line)",
            setting="SUREHAND_COMMAND_AGENT",
        )
    if argv[0] == "claude":
        return Program("claude", argv)
    if argv[0] == "codex":
        return Program("codex", argv, report_file=LAST_MESSAGE)
    return Program(None, argv)


def claude_argv(base: Sequence[str]) -> list[str]:
    """``claude -p PROMPT`` on the session's MCP config alone, its tools allowed, text out."""
    return [
        base[0],
        "-p",
        "Do the TASK in TASK.md, following the instructions about the surehand tools.",
        "--append-system-prompt",
        AGENT_PROMPT,
        "--mcp-config",
        ".mcp.json",
        "--strict-mcp-config",
        "--allowedTools",
        f"mcp__{SERVER_NAME}",
        "--output-format",
        "text",
        *base[1:],
    ]


def codex_argv(base: Sequence[str], mcp_url: str | None) -> list[str]:
    """``codex exec`` with the session MCP server given by ``-c`` overrides (nothing written
    to the user's ``~/.codex``) and the final message written to ``last-message.txt``."""
    servers = []
    if mcp_url is not None:
        servers = [
            "-c",
            f"mcp_servers.{SERVER_NAME}.url={json.dumps(mcp_url)}",
            "-c",
            f"mcp_servers.{SERVER_NAME}.bearer_token_env_var={json.dumps(TOKEN_ENV)}",
        ]
    return [
        base[0],
        "exec",
        "--skip-git-repo-check",
        "--output-last-message",
        LAST_MESSAGE,
        *servers,
        *base[1:],
        AGENT_PROMPT,
    ]


def mcp_configs(mcp_url: str) -> dict[str, str]:
    """``.mcp.json`` (Claude Code, Cursor and others) and ``.codex/config.toml`` (Codex) for the
    session directory, by name: they name the session MCP server; the token stays in the env."""
    claude = {
        "mcpServers": {
            SERVER_NAME: {
                "type": "http",
                "url": mcp_url,
                "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"},
            }
        }
    }
    codex = (
        f"[mcp_servers.{SERVER_NAME}]\nurl = {json.dumps(mcp_url)}\n"
        f"bearer_token_env_var = {json.dumps(TOKEN_ENV)}\n"
    )
    return {".mcp.json": json.dumps(claude, indent=2) + "\n", ".codex/config.toml": codex}
