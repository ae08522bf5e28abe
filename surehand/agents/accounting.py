"""What an agent CLI says it spent, read from its own output (issue 32, item 3).

Claude Code with ``--output-format json`` prints one result object: ``result`` (its final
message), ``is_error`` and ``subtype`` (``success``, ``error_max_budget_usd``,
``error_max_turns``...), ``total_cost_usd``, ``usage`` and ``modelUsage`` (per model:
``inputTokens``, ``outputTokens``, ``cacheReadInputTokens``, ``cacheCreationInputTokens``,
``costUSD``). When it stops on ``--max-budget-usd`` its ``usage`` is zeroed and only
``modelUsage`` keeps the counts, so the tokens are read from there. Codex with ``--json``
prints one event a line; each ``turn.completed`` carries that turn's ``usage``
(``input_tokens``, ``cached_input_tokens``, ``cache_write_input_tokens``, ``output_tokens``)
and no cost. Checked against Claude Code 2.1.332 and Codex 0.171.0.

Whatever the program printed is untrusted text: anything that does not parse is no accounting
(None), never an error, and every number is checked to be one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BUDGET_SUBTYPE = "error_max_budget_usd"
_CLAUDE_TOKENS = {
    "input_tokens": "inputTokens",
    "output_tokens": "outputTokens",
    "cache_read_tokens": "cacheReadInputTokens",
    "cache_creation_tokens": "cacheCreationInputTokens",
}
_CODEX_TOKENS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cached_input_tokens",
    "cache_creation_tokens": "cache_write_input_tokens",
}
TOKEN_KINDS = tuple(_CLAUDE_TOKENS)


@dataclass(frozen=True)
class ClaudeResult:
    """Claude Code's result object, as far as surehand reads it."""

    result: str
    is_error: bool
    subtype: str
    errors: tuple[str, ...]
    usage: dict[str, Any] | None

    @property
    def budget_spent(self) -> bool:
        return self.subtype == BUDGET_SUBTYPE


def claude_result(stdout: str) -> ClaudeResult | None:
    """The result object Claude Code printed last (None if there is none)."""
    found = _last_object(stdout.splitlines()[::-1] or [stdout], kind="result")
    if found is None:
        return None
    errors = found.get("errors")
    return ClaudeResult(
        result=str(found.get("result") or ""),
        is_error=found.get("is_error") is True,
        subtype=str(found.get("subtype") or ""),
        errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (),
        usage=_claude_usage(found),
    )


def _claude_usage(found: Mapping[str, Any]) -> dict[str, Any] | None:
    by_model = found.get("modelUsage")
    if not isinstance(by_model, dict):
        return None
    models: dict[str, dict[str, float]] = {}
    for name, counts in by_model.items():
        if isinstance(counts, dict):
            models[str(name)[:100]] = {
                **{ours: _number(counts.get(theirs)) for ours, theirs in _CLAUDE_TOKENS.items()},
                "cost_usd": _number(counts.get("costUSD")),
            }
    if not models:
        return None
    usage: dict[str, Any] = {
        kind: int(sum(m[kind] for m in models.values())) for kind in TOKEN_KINDS
    }
    usage["model"] = max(models, key=lambda name: models[name]["cost_usd"])
    usage["cost_usd"] = _number(found.get("total_cost_usd"))
    usage["by_model"] = models
    return usage


def codex_usage(stdout: str, model: str | None) -> dict[str, Any] | None:
    """The tokens of every ``turn.completed`` event Codex printed (no cost: it reports none)."""
    turns = []
    for line in stdout.splitlines():
        event = _object(line)
        if event is not None and event.get("type") == "turn.completed":
            counts = event.get("usage")
            if isinstance(counts, dict):
                turns.append(counts)
    if not turns:
        return None
    usage: dict[str, Any] = {
        ours: int(sum(_number(turn.get(theirs)) for turn in turns))
        for ours, theirs in _CODEX_TOKENS.items()
    }
    usage["model"] = model or "codex"
    usage["cost_usd"] = None
    return usage


def codex_model(argv: Sequence[str]) -> str | None:
    """The model a codex command line names (``-m``/``--model``), if any."""
    for index, arg in enumerate(argv[:-1]):
        if arg in ("-m", "--model"):
            return argv[index + 1]
    return None


def _last_object(lines: Sequence[str], *, kind: str) -> dict[str, Any] | None:
    for line in lines:
        found = _object(line)
        if found is not None and found.get("type") == kind:
            return found
    return None


def _object(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _number(value: Any) -> float:
    """A count or amount the CLI printed; anything else (or negative, or not finite) is 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return float(value) if math.isfinite(value) and value >= 0 else 0
