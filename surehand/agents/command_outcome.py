"""What a command agent's finished program comes to: what its CLI said it spent (its own
accounting, noted on the attempt), its final message (the REPORT) and, when it failed, the
reason a person reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from surehand.agents.accounting import ClaudeResult, claude_result, codex_model, codex_usage
from surehand.agents.context import SessionContext
from surehand.agents.outputs import TAIL, read_report_file, tail_of
from surehand.agents.presets import Program


def account(program: Program, ctx: SessionContext, stdout: IO[bytes]) -> ClaudeResult | None:
    """Note what the CLI said it spent (its own accounting) and, for Claude Code, its
    final result message; the parsed result (None: not Claude Code's JSON)."""
    text = tail_of(stdout)
    if program.preset == "codex":
        usage = codex_usage(text, codex_model(program.base))
        if usage is not None:
            ctx.note(usage=usage)
        return None
    if program.preset != "claude":
        return None
    claude = claude_result(text)
    if claude is None:
        return None
    ctx.details.setdefault("output", {})["result"] = claude.result[-TAIL:]
    if claude.usage is not None:
        ctx.note(usage=claude.usage)
    return claude


def report_text(program: Program, work_dir: Path, stdout: IO[bytes]) -> str:
    """The program's final message (a preset's report file), else its standard output."""
    report_file = program.report_file
    if report_file is not None and (text := read_report_file(work_dir, report_file)):
        return text
    return tail_of(stdout)


def failure_reason(claude: ClaudeResult | None, output: dict[str, str]) -> str:
    """Why a program failed: what Claude Code says, else the end of what it wrote."""
    return _claude_reason(claude) or _reason(output)


def _claude_reason(claude: ClaudeResult | None) -> str:
    """Why Claude Code says it failed: its errors, else its final message (its JSON is no
    reason a person reads)."""
    if claude is None:
        return ""
    said = "; ".join(claude.errors) or claude.result
    return f"{claude.subtype}: {said}"[-500:] if claude.subtype else said[-500:]


def _reason(output: dict[str, str]) -> str:
    """What a failed program said last: its error output's end, else its output's."""
    said = (output.get("stderr") or "").strip() or (output.get("stdout") or "").strip()
    return said[-500:]
