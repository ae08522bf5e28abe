"""The demo agent of the quick start: declares one effect (writing a file), then reports."""

from __future__ import annotations

import time
from pathlib import Path

from surehand.agents.context import EffectResult, SessionContext


def demo_agent(ctx: SessionContext) -> str:
    """Write the TASK's subject to a file in the session directory, declared as an operation."""
    # The path depends on the TASK, not the attempt: a successor declares the same operation
    # (same fingerprint) and gets the recorded outcome instead of writing again.
    sessions = ctx.work_dir.parent if ctx.work_dir else Path(".surehand/sessions")
    work_dir = sessions / ctx.task.task_id
    target = work_dir / "answer.txt"

    def write_answer() -> EffectResult:
        work_dir.mkdir(parents=True, exist_ok=True)
        target.write_text(f"Done: {ctx.task.fields.subject}\n", encoding="utf-8")
        return EffectResult(value=str(target), external_receipt=f"file:{target}")

    written = ctx.operation(
        "write_file",
        {"path": str(target), "task_id": ctx.task.task_id},
        write_answer,
        idempotency_key=f"{ctx.task.task_id}:answer",
        retry_policy="keyed",
    )
    ctx.wait_cancelled(0.2)  # a moment of "work", interruptible if the lease is lost
    ctx.log.info("demo agent finished %s at %s", ctx.task.task_id, time.strftime("%H:%M:%S"))
    return (
        f"Demo agent handled {ctx.task.task_id} ({ctx.task.fields.subject!r}) in attempt "
        f"{ctx.attempt.number}; wrote {written}."
    )
