"""What Claude Code's hooks decide about a tool call: pass it, deny it, or journal it.

An LLM that runs ``git push`` or calls another MCP server's tool without ``effect_begin``
leaves no record, and after a crash surehand could not know the effect happened. So the claude
preset gives Claude Code ``type: "http"`` hooks (:func:`surehand.agents.presets.hook_settings`)
that post every tool call to the session server, which decides here, from the operator's
settings alone (:class:`HookPolicy`, held in the session's grant), and journals it
(:mod:`surehand.mcp.session_hooks`). Nothing in the sandbox runs for a hook and nothing the
agent writes is read: a call is effectful or not, permitted or not, by these rules only.

- A call of an *effectful* tool (``SUREHAND_CLAUDE_EFFECTFUL``: fnmatch patterns, by default
  ``Bash`` and other MCP servers' tools; never the session's own tools) is decided here, not
  by Claude Code: one the operator's tools do not permit (:func:`permission`), or a background
  command (its outcome would be recorded before it ends), is denied; a permitted one is
  journaled as an operation intent, then allowed -- also while the agent's own declared effect
  is open (the record is linked to it). Deciding here is what keeps the journal whole: the hook
  fires before Claude Code's own permission check, and a call that check refused would get no
  after event, leaving its intent open for ever.
- Any other call passes: Claude Code's own permission check decides it.

A git command that only a scoped rule permits is checked (:mod:`surehand.agents.git_rules`)
and runs with ``-c core.fsmonitor=false -c core.hooksPath=/dev/null -c
protocol.ext.allow=never`` put before its subcommand (the hook's ``updatedInput``), so neither
``--receive-pack`` nor a hook or monitor armed in the repository's config runs; its record
keeps the command as the agent wrote it.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from surehand.agents import git_rules
from surehand.agents.recognisers import Clone

SESSION_TOOLS = "mcp__surehand__"
SHELL_OPERATORS = re.compile(r"[;&|<>`$()\n\\]")
DEFAULT_EFFECTFUL = ("Bash", "mcp__*")  # WebFetch only GETs
GIT_HARDENING = (
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "protocol.ext.allow=never",
)
Action = Literal["pass", "deny", "journal"]


@dataclass(frozen=True)
class HookPolicy:
    """What the operator's settings say about one session's tool calls.

    ``allowed``: the ``--allowedTools`` rules (the session tools and
    ``SUREHAND_CLAUDE_TOOLS``); ``git_remotes``: the remotes (names or URLs) a scoped
    ``git push`` rule may push to."""

    effectful: tuple[str, ...] = DEFAULT_EFFECTFUL
    allowed: tuple[str, ...] = ("mcp__surehand",)
    git_remotes: tuple[str, ...] = git_rules.DEFAULT_REMOTES
    # The TASK's clone, whose pushes are recognised (surehand.agents.recognisers).
    clone: Clone | None = None


@dataclass(frozen=True)
class Decision:
    """What to answer a ``PreToolUse`` event: pass it on, deny it (``reason``), or journal it
    and allow it (with ``updated_input`` to run instead, if any)."""

    action: Action
    reason: str = ""
    updated_input: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Verdict:
    """Whether the operator's rules permit a call; why not; what to run instead."""

    permitted: bool
    reason: str = ""
    updated_input: Mapping[str, Any] | None = field(default=None)


PASS = Decision("pass")


def decide(
    policy: HookPolicy, tool: str, tool_input: Mapping[str, Any], permission_mode: str
) -> Decision:
    """The decision about one call, from the policy alone."""
    if not is_effectful(tool, policy.effectful):
        return PASS
    verdict = permission(tool, tool_input, policy, permission_mode)
    if not verdict.permitted:
        return Decision("deny", verdict.reason)
    if tool == "Bash" and tool_input.get("run_in_background"):
        return Decision(
            "deny",
            "surehand records this command's outcome when it ends: "
            "run it in the foreground (without run_in_background)",
        )
    return Decision("journal", updated_input=verdict.updated_input)


def is_effectful(tool: str, effectful: Sequence[str]) -> bool:
    """Whether a call may change the outside world and must be journaled."""
    if tool.startswith(SESSION_TOOLS):
        return False
    return any(fnmatch.fnmatchcase(tool, pattern) for pattern in effectful)


def permission(
    tool: str, tool_input: Mapping[str, Any], policy: HookPolicy, permission_mode: str
) -> Verdict:
    """Whether the operator's rules permit this call.

    Rules: ``Tool`` (every call), ``mcp__server`` (its tools), a pattern with ``*``,
    ``Bash(command)`` (exactly), ``Bash(prefix:*)`` (the prefix as whole words),
    ``Bash(glob*)`` and ``WebFetch(domain:host)``. A scoped Bash rule never permits a command
    with shell operators (Claude Code checks each part of one; these rules do not split them),
    so a compound command needs the plain ``Bash`` rule; a git command it permits is checked
    by :mod:`surehand.agents.git_rules`."""
    if permission_mode == "bypassPermissions":
        return Verdict(True)
    refusals = []
    for entry in policy.allowed:
        verdict = _rule(entry, tool, tool_input, policy.git_remotes)
        if verdict is not None and verdict.permitted:
            return verdict
        if verdict is not None:
            refusals.append(verdict.reason)
    allowed = ", ".join(policy.allowed) or "nothing"
    why = f" ({'; '.join(refusals)})" if refusals else ""
    return Verdict(
        False,
        f"surehand: {tool} is not permitted in this session{why} (the operator allows: {allowed})",
    )


def _rule(
    entry: str, tool: str, tool_input: Mapping[str, Any], remotes: Sequence[str]
) -> Verdict | None:
    """The rule's verdict on the call, or None when the rule does not speak of it."""
    name, scoped, spec = entry.partition("(")
    if not scoped:
        matched = tool == name or tool.startswith(f"{name}__") or fnmatch.fnmatchcase(tool, name)
        return Verdict(True) if matched else None
    if name != tool or not spec.endswith(")"):
        return None
    spec = spec[:-1].strip()
    if spec in ("", "*"):
        return Verdict(True)
    if tool == "Bash":
        return _command_rule(spec, str(tool_input.get("command", "")).strip(), tool_input, remotes)
    if tool == "WebFetch" and spec.startswith("domain:"):
        host = urlsplit(str(tool_input.get("url", ""))).hostname
        return Verdict(True) if host == spec.removeprefix("domain:") else None
    return None


def _command_rule(
    spec: str, command: str, tool_input: Mapping[str, Any], remotes: Sequence[str]
) -> Verdict | None:
    if SHELL_OPERATORS.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not git_rules.is_git(words):
        return Verdict(True) if _matches(spec, command) else None
    return _git_rule(spec, command, words, tool_input, remotes)


def _git_rule(
    spec: str,
    command: str,
    words: list[str],
    tool_input: Mapping[str, Any],
    remotes: Sequence[str],
) -> Verdict | None:
    """A git command under a scoped rule: matched without its ``-C`` options, then checked,
    and hardened against what the repository's config may run."""
    try:
        git = git_rules.parse(words)
    except git_rules.GitRefused as refused:
        return Verdict(False, str(refused)) if _matches(spec, command) else None
    if not (_matches(spec, command) or _matches(spec, shlex.join(git.words))):
        return None
    try:
        git_rules.check(git, remotes)
    except git_rules.GitRefused as refused:
        return Verdict(False, str(refused))
    hardened = shlex.join([words[0], *GIT_HARDENING, *words[1:]])
    return Verdict(True, updated_input={**tool_input, "command": hardened})


def _matches(spec: str, command: str) -> bool:
    if spec.endswith(":*"):
        prefix = spec[:-2].strip()
        return command == prefix or command.startswith(f"{prefix} ")
    return fnmatch.fnmatchcase(command, spec)


def operation_of(tool: str, tool_input: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The operation name and args a call is journaled as: the same call, the same effect."""
    identity = {"command": tool_input.get("command")} if tool == "Bash" else dict(tool_input)
    name = "claude:" + re.sub(r"[^A-Za-z0-9._:/@+-]+", "-", tool.replace("__", "/"))
    return name[:255], {"undeclared": True, "tool": tool, "input": identity}


def allow(reason: str, updated_input: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Claude Code's hook answer that allows the call (and runs ``updated_input`` instead)."""
    output: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": reason,
    }
    if updated_input is not None:
        output["updatedInput"] = dict(updated_input)
    return {"hookSpecificOutput": output}


def deny(reason: str) -> dict[str, Any]:
    """Claude Code's hook answer that refuses the call; the model reads ``reason``."""
    output = {"hookEventName": "PreToolUse", "permissionDecision": "deny"}
    return {"hookSpecificOutput": {**output, "permissionDecisionReason": reason}}
