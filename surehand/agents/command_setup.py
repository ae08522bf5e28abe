"""What a command agent's program is launched with, besides its confinement: the preset
options the settings allow, the hooks' policy for the TASK's clone, and the ``SUREHAND_*``
variables naming its TASK, attempt and session server.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from surehand.agents.claude_hook import HookPolicy
from surehand.agents.context import SessionContext
from surehand.agents.git_rules import DEFAULT_REMOTES
from surehand.agents.presets import TOKEN_ENV, URL_ENV, PresetOptions
from surehand.agents.recognisers import Clone
from surehand.agents.session_door import AgentGrant
from surehand.agents.workspaces import Workspace
from surehand.config import Settings


def preset_options(settings: Settings) -> PresetOptions:
    """What the settings let a preset do (tools, MCP configs, hooks, Codex's sandbox)."""

    def items(text: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in text.split(",") if part.strip())

    return PresetOptions(
        claude_tools=items(settings.claude_tools),
        claude_mcp_configs=items(settings.claude_mcp_config),
        claude_hooks=settings.claude_hooks,
        effectful=items(settings.claude_effectful),
        read_only_commands=items(settings.claude_read_only_commands),
        codex_sandbox=settings.codex_sandbox,
        hook_timeout=settings.claude_hook_timeout_seconds,
    )


def with_clone(policy: HookPolicy | None, workspace: Workspace | None) -> HookPolicy | None:
    """The hooks' policy with the TASK's clone, whose pushes they recognise."""
    if policy is None or workspace is None or workspace.repo is None:
        return policy
    return dataclasses.replace(policy, clone=Clone(workspace.path, workspace.remotes))


def remote_names(workspace: Workspace | None) -> tuple[str, ...]:
    """The remotes a scoped push rule lets the session push to: its clone's (the
    repository's), else ``origin`` (a shared directory's remotes the worker never reads)."""
    if workspace is None or workspace.repo is None:
        return DEFAULT_REMOTES
    return tuple(name for name, _url in workspace.remotes)


def session_env(ctx: SessionContext, work_dir: Path, grant: AgentGrant | None) -> dict[str, str]:
    """The variables naming the session's TASK, attempt, files and (with a grant) server."""
    env = {
        "SUREHAND_TASK_ID": ctx.task.task_id,
        "SUREHAND_ATTEMPT_ID": ctx.attempt.attempt_id,
        "SUREHAND_ATTEMPT": str(ctx.attempt.number),
        "SUREHAND_TASK_FILE": str(work_dir / "TASK.md"),
        "SUREHAND_SESSION_DIR": str(work_dir),
        "SUREHAND_ROLE": ctx.task.fields.recipient,
        "SUREHAND_TENANT": ctx.task.tenant,
    }
    if grant is not None:
        env.update({URL_ENV: grant.url, TOKEN_ENV: grant.token})
    return env
