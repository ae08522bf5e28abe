"""The agent compose/check runs on its DEV workers: two declared effects with a pause between
them (``pause=N`` in the TASK's subject), each appending one JSON line to an effect ledger on a
volume every worker container shares (``CHECK_LEDGER``), as an external system keeps its own
record.

Each line names the TASK, the step, the attempt and the container (its hostname), so the check
sees which worker ran what, kills the one in the pause, and counts every effect in the end:
a successor replays the first (recorded) effect and runs only the second. A TASK whose
subject says ``stubborn`` has an agent that ignores being stopped and declares a late effect.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path

from surehand.agents.context import EffectResult, SessionContext


def ledger(ctx: SessionContext) -> str:
    """Effect ``first``, a pause (the window to cut), then effect ``second``."""
    task_id = ctx.task.task_id
    # Only a first attempt pauses: a successor replays ``first`` and goes straight on.
    first_pause = _pause_seconds(ctx) if ctx.attempt.number == 1 else 0.0
    for step, pause in (("first", first_pause), ("second", 0.0)):
        ctx.operation(
            f"ledger.{step}",
            {"task": task_id, "step": step},
            _append(ctx, step),
            idempotency_key=f"{task_id}:{step}",
            retry_policy="keyed",
        )
        if pause and ctx.wait_cancelled(pause):
            if "stubborn" in ctx.task.fields.subject:
                return _carry_on(ctx, pause)
            return f"stopped in the pause on {socket.gethostname()}"
    return f"{task_id}: both effects in attempt {ctx.attempt.number} on {socket.gethostname()}"


def _carry_on(ctx: SessionContext, pause: float) -> str:
    """A misbehaving agent: told to stop (its session lost the lease), it sits out its pause
    and declares one more effect. That write must be fenced and the effect must not run."""
    time.sleep(pause)
    task_id = ctx.task.task_id
    ctx.operation("ledger.late", {"task": task_id}, _append(ctx, "late"))
    return f"{task_id}: a late effect was applied on {socket.gethostname()}"


def _append(ctx: SessionContext, step: str) -> Callable[[], EffectResult]:
    def effect() -> EffectResult:
        line = {
            "task_id": ctx.task.task_id,
            "step": step,
            "attempt": ctx.attempt.number,
            "host": socket.gethostname(),
        }
        with Path(os.environ.get("CHECK_LEDGER", "/ledger/effects.jsonl")).open("a") as out:
            out.write(json.dumps(line) + "\n")
        return EffectResult(value=line, external_receipt=f"ledger:{ctx.task.task_id}:{step}")

    return effect


def _pause_seconds(ctx: SessionContext) -> float:
    """``pause=N`` in the TASK's subject, else ``CHECK_AGENT_SECONDS`` (default 1)."""
    found = re.search(r"pause=(\d+(?:\.\d+)?)", ctx.task.fields.subject)
    return float(found.group(1) if found else os.environ.get("CHECK_AGENT_SECONDS", "1"))
