"""Settings of how a command agent's session works: its workspace, the claude and codex
presets, Claude Code's hooks (the journal), the session tools' limits, delegation depth and
how many interruptions in a row hold a TASK.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SessionSettings(BaseModel):
    """Workspaces, the presets, the journal and the session tools' limits."""

    agent_workspace: str = Field(
        "",
        description="Where command agent sessions work: a comma list of [ROLE=]SPEC, a role's "
        "entry overriding the one without. SPEC: a directory (shared, bound read-write into the "
        "sandbox) or worktree:/path/to/repo (a clone of its own per TASK on the branch "
        "surehand/<task id>, fetched into the repository when a session ends; its successors "
        "find it). The claude preset gets it with --add-dir, "
        "codex with -C, programs in SUREHAND_WORKSPACE (docs/agents/claude-code-and-codex.md).",
    )
    claude_tools: str = Field(
        "",
        description="Comma list of further tools the claude preset allows besides the session "
        "tools (--allowedTools), e.g. Bash,Edit,Write,mcp__github (every tool of that server).",
    )
    claude_mcp_config: str = Field(
        "",
        description="Comma list of MCP config files (Claude Code's .mcp.json format) with the "
        "operator's own servers, passed to the claude preset with --mcp-config; allow their "
        "tools in SUREHAND_CLAUDE_TOOLS and pass their secrets by SUREHAND_AGENT_ENV.",
    )
    claude_hooks: bool = Field(
        True,
        description="Journal the claude preset's effectful tool calls the agent did not declare "
        "(Claude Code hooks): an operation intent before each, its outcome after.",
    )
    claude_effectful: str = Field(
        "Bash,mcp__*",
        description="Comma list of tool name patterns (fnmatch) whose calls the claude hooks "
        "journal as effects; the session's own tools never are (WebFetch only GETs: add it "
        "where a GET of yours has effects).",
    )
    claude_read_only_commands: str = Field(
        "",
        description="Retired: it listed Bash commands the claude hooks did not journal. Every "
        "Bash command first runs a shell setup the agent can rewrite, and git runs filters, "
        "diff drivers and hooks from repository config the agent can write, so no command can "
        "be exempt: every Bash command is journaled, and a worker with this set refuses to "
        "start until it is unset.",
    )
    # --- the journal: Claude Code's hooks, the session tools' limits (issue 29, journal) ----
    claude_hook_timeout_seconds: int = Field(
        60,
        ge=1,
        le=600,
        description="How long Claude Code waits for the session server to answer a hook "
        "(each tool call's journaling); an answer that does not come in time blocks the call.",
    )
    session_tools_max_operations: int = Field(
        500,
        ge=1,
        description="Operations (effect_begin and the hooks' journaled calls) one session may "
        "record; more are refused with session_limit (a journaled call is then denied).",
    )
    session_tools_max_reports: int = Field(
        100,
        ge=1,
        description="REPORT revisions (report and progress calls) one session may ask for; "
        "more are refused with session_limit (its final message is still its REPORT).",
    )
    session_tools_max_mib: int = Field(
        32,
        ge=1,
        description="MiB of arguments (REPORT bodies, effect args, outcomes, journaled tool "
        "input and output) one session may send to be stored; more is refused with "
        "session_limit.",
    )
    session_tools_max_children: int = Field(
        50,
        ge=1,
        description="Child TASKs (delegate calls, ctx.delegate) one session may ask for; more "
        "are refused with session_limit (a call answered reused counts too).",
    )
    delegation_max_depth: int = Field(
        8,
        ge=1,
        description="How deep delegated TASKs may nest: a session whose TASK already has this "
        "many ancestors (parent, its parent...) cannot delegate (session_limit), so no chain "
        "of agents grows the queue without end.",
    )
    session_tools_calls_per_minute: int = Field(
        300,
        ge=1,
        description="Calls to the session tools and journaled hook events one session may "
        "make in any 60 seconds; more are refused with session_limit (retryable) until the "
        "minute passes.",
    )
    codex_sandbox: Literal["auto", "read-only", "workspace-write", "danger-full-access"] = Field(
        "auto",
        description="Codex's own sandbox mode for the codex preset; auto: danger-full-access "
        "inside surehand's bwrap sandbox (which confines it), workspace-write outside it.",
    )
    max_consecutive_interruptions: int = Field(
        3,
        ge=1,
        description="A TASK whose last attempts were interrupted or failed this many times in "
        "a row is held for its approver instead of run again.",
    )
