"""Claude Code hooks that journal the effects an agent never declared.

An LLM that runs ``git push`` or calls another MCP server's tool without ``effect_begin``
leaves no record, and after a crash surehand could not know the effect happened. So the claude
preset passes Claude Code hooks (``--settings``, inline: nothing in the session directory to
edit) that run this module around every tool call:

- ``PreToolUse``: a call of an *effectful* tool (``SUREHAND_CLAUDE_EFFECTFUL``: fnmatch
  patterns, by default ``Bash`` and other MCP servers' tools, not ``WebFetch``, which only
  GETs; a request of another method goes through Bash and is journaled; a Bash command
  that is one of the operator's read-only commands, without shell operators, is not) made
  while the agent has no effect of its own open is decided here, not by Claude Code: a call
  the operator's tools do not permit (:func:`permits`), or a background command (its outcome
  would be recorded before it ends), is denied; a permitted one is recorded as an operation
  intent through the session MCP server (``effect_begin``, as this session: the token of its
  environment) and then allowed. Deciding here is what keeps the journal whole: the hook
  fires before Claude Code's own permission check, and a call that check refused would get no
  after event, leaving its intent open for ever. If the TASK already recorded the same call as
  succeeded (a successor repeating its predecessor's command), the call is blocked with the
  recorded outcome; if the server refuses (a stale attempt, an unsafe repeat) it is blocked
  with the reason.
- ``PostToolUse`` / ``PostToolUseFailure``: the intent is settled (``effect_end``) as
  succeeded, with the tool's response, or failed, with its error.

An intent left open only by an interruption makes admission hold the TASK for review: the case
names the exact command. Every failure of the hook itself blocks the call (exit status 2; any
other status would let Claude Code run it). What the hooks cannot see: what a command does
beyond its exit (a daemon it starts, the far side's own effects), and anything the agent does
by a way Claude Code does not call a tool. A deny rule of Claude Code's own settings (managed
settings) still refuses a call this hook allowed: its intent stays open and the TASK is held,
which is safe but needs a review.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BLOCK = 2  # the only status that makes Claude Code refuse a PreToolUse call
SESSION_TOOLS = "mcp__surehand__"
STATE_DIR = ".surehand-hooks"
SHELL_OPERATORS = re.compile(r"[;&|<>`$()\n\\]")
MAX_RESPONSE = 8000
EVENTS = {"PreToolUse": "pre", "PostToolUse": "post", "PostToolUseFailure": "failure"}
# The settings that install this file as the hooks: surehand.agents.presets.hook_settings.


def is_effectful(
    tool: str, tool_input: dict[str, Any], effectful: Sequence[str], read_only: Sequence[str]
) -> bool:
    """Whether a call may change the outside world and must be journaled."""
    if tool.startswith(SESSION_TOOLS) or not any(fnmatch.fnmatchcase(tool, p) for p in effectful):
        return False
    if tool != "Bash":
        return True
    command = str(tool_input.get("command", "")).strip()
    if SHELL_OPERATORS.search(command):
        return True
    return not any(command == ok or command.startswith(f"{ok} ") for ok in read_only)


def permits(
    tool: str, tool_input: dict[str, Any], allowed: Sequence[str], permission_mode: str
) -> bool:
    """Whether the operator's tools (``--allowedTools`` rules) permit this call. The hook
    decides an effectful call with this (allow or deny), so what it journals is what runs.

    Rules: ``Tool`` (every call), ``mcp__server`` (its tools), a pattern with ``*``,
    ``Bash(command)`` (exactly), ``Bash(prefix:*)`` (the prefix as whole words),
    ``Bash(glob*)`` and ``WebFetch(domain:host)``. A scoped Bash rule never permits a command
    with shell operators (Claude Code checks each part of one; this hook does not split
    them), so a compound command needs the plain ``Bash`` rule."""
    if permission_mode == "bypassPermissions":
        return True
    return any(_rule_permits(entry, tool, tool_input) for entry in allowed)


def _rule_permits(entry: str, tool: str, tool_input: dict[str, Any]) -> bool:
    name, scoped, spec = entry.partition("(")
    if not scoped:
        return tool == name or tool.startswith(f"{name}__") or fnmatch.fnmatchcase(tool, name)
    if name != tool or not spec.endswith(")"):
        return False
    spec = spec[:-1].strip()
    if spec in ("", "*"):
        return True
    if tool == "Bash":
        return _command_permitted(spec, str(tool_input.get("command", "")).strip())
    if tool == "WebFetch" and spec.startswith("domain:"):
        return urlsplit(str(tool_input.get("url", ""))).hostname == spec.removeprefix("domain:")
    return False


def _command_permitted(spec: str, command: str) -> bool:
    if SHELL_OPERATORS.search(command):
        return False
    if spec.endswith(":*"):
        prefix = spec[:-2].strip()
        return command == prefix or command.startswith(f"{prefix} ")
    return fnmatch.fnmatchcase(command, spec)


def operation_of(tool: str, tool_input: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The operation name and args a call is journaled as: the same call, the same effect."""
    identity = {"command": tool_input.get("command")} if tool == "Bash" else tool_input
    name = "claude:" + re.sub(r"[^A-Za-z0-9._:/@+-]+", "-", tool.replace("__", "/"))
    return name[:255], {"undeclared": True, "tool": tool, "input": identity}


class Journal:
    """One hook run: the call, the options, and this session's hook state directory."""

    def __init__(self, payload: dict[str, Any], options: argparse.Namespace) -> None:
        self.payload = payload
        self.tool = str(payload.get("tool_name", ""))
        self.input = payload.get("tool_input") or {}
        self.effectful = _items(options.effectful)
        self.read_only = _items(options.read_only)
        self.allowed = _items(options.allowed)
        self.state = Path(os.environ.get("SUREHAND_SESSION_DIR", ".")) / STATE_DIR
        self.state.mkdir(mode=0o700, exist_ok=True)

    def pre(self) -> int:
        if not is_effectful(self.tool, self.input, self.effectful, self.read_only):
            return 0
        if self._declared():
            return 0  # the agent declared this effect itself (effect_begin ... effect_end)
        mode = str(self.payload.get("permission_mode", ""))
        if not permits(self.tool, self.input, self.allowed, mode):
            return _decide(
                "deny",
                f"surehand: {self.tool} is not permitted in this session "
                f"(the operator allows: {', '.join(self.allowed) or 'nothing'})",
            )
        if self.tool == "Bash" and self.input.get("run_in_background"):
            return _decide(
                "deny",
                "surehand records this command's outcome when it ends: "
                "run it in the foreground (without run_in_background)",
            )
        name, args = operation_of(self.tool, self.input)
        begun = _call("effect_begin", {"name": name, "args": args})
        if begun.get("status") == "already_done":
            print(_already_done(begun), file=sys.stderr)
            return BLOCK
        self._call_file().write_text(json.dumps({"operation_id": begun["operation_id"]}))
        return _decide("allow", f"surehand journaled it as operation {begun['operation_id']}")

    def post(self, failed: bool) -> int:
        self._track_declared()
        path = self._call_file()
        if not path.exists():
            return 0
        operation_id = json.loads(path.read_text())["operation_id"]
        outcome: dict[str, Any]
        if failed:
            error = str(self.payload.get("error") or "the tool call failed")[-4000:]
            outcome = {"outcome": "failed", "error": error}
        else:
            response = json.dumps(self.payload.get("tool_response"), default=str)
            outcome = {"outcome": "succeeded", "value": {"response": response[-MAX_RESPONSE:]}}
        _call("effect_end", {"operation_id": operation_id, **outcome})
        path.unlink()
        return 0

    def _call_file(self) -> Path:
        call_id = re.sub(r"[^A-Za-z0-9_-]", "_", str(self.payload.get("tool_use_id", "call")))
        return self.state / f"{call_id}.json"

    def _declared_file(self) -> Path:
        return self.state / "declared.json"

    def _declared(self) -> set[int]:
        path = self._declared_file()
        return set(json.loads(path.read_text())) if path.exists() else set()

    def _track_declared(self) -> None:
        """Follow the agent's own effect_begin / effect_end (their after events)."""
        declared = self._declared()
        if self.tool == f"{SESSION_TOOLS}effect_begin":
            answer = _answer(self.payload.get("tool_response"))
            if answer.get("status") == "begun":
                declared.add(int(answer["operation_id"]))
        elif self.tool == f"{SESSION_TOOLS}effect_end":
            declared.discard(int(self.input.get("operation_id", -1)))
        else:
            return
        self._declared_file().write_text(json.dumps(sorted(declared)))


def _decide(decision: str, reason: str) -> int:
    """Answer Claude Code's permission question for this call (exit 0 with the decision)."""
    output = {"hookEventName": "PreToolUse", "permissionDecision": decision}
    print(json.dumps({"hookSpecificOutput": {**output, "permissionDecisionReason": reason}}))
    return 0


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _answer(response: Any) -> dict[str, Any]:
    """The JSON object a session tool answered, wherever Claude Code put it."""
    if isinstance(response, dict) and "status" in response:
        return response
    if isinstance(response, str):
        try:
            return _answer(json.loads(response))
        except ValueError:
            return {}
    parts = response.values() if isinstance(response, dict) else response
    for part in parts if isinstance(parts, (list, type({}.values()))) else []:
        found = _answer(part)
        if found:
            return found
    return {}


def _already_done(answer: dict[str, Any]) -> str:
    return (
        f"surehand: this call already ran for this TASK (operation {answer.get('operation_id')}, "
        f"attempt {answer.get('attempt')}); it was NOT run again. Its recorded outcome: "
        f"{json.dumps(answer.get('outcome'), default=str)[:2000]}"
    )


def _call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    from surehand.agents.session_client import call_tool, session_grant

    url, token = session_grant()
    return call_tool(url, token, tool, arguments)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one hook: the event's payload on stdin; the status Claude Code acts on."""
    parser = argparse.ArgumentParser(prog="surehand-claude-hook")
    parser.add_argument("event", choices=sorted(EVENTS.values()))
    parser.add_argument("--effectful", default="")
    parser.add_argument("--read-only", default="")
    parser.add_argument("--allowed", default="")
    options = parser.parse_args(argv)
    try:
        journal = Journal(json.load(sys.stdin), options)
        return journal.pre() if options.event == "pre" else journal.post(options.event == "failure")
    except Exception as error:  # every failure of the journal blocks the call it guards
        print(f"surehand could not journal this tool call: {error}", file=sys.stderr)
        return BLOCK if options.event == "pre" else 1


if __name__ == "__main__":
    sys.exit(main())
