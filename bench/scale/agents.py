"""The worker-side code of ``bench/scale/``; workers import it as ``bench.scale.agents``
(``PYTHONPATH`` the repository).

* ``sleeping``: a long Python agent that waits (cancellably) the seconds its TASK body names,
  as an agent waiting on an LLM would; it stamps when it starts running.
* ``probe``: stamps when it runs, declares one operation (the intent and outcome are recorded
  in the store before it returns), stamps again, and returns: submit -> running and
  submit -> first effect recorded.
* ``noop``: stamps and returns at once (the steady load).

Stamps are JSON lines ``{"task": id, "what": ..., "at": unix seconds}`` appended to the file
``BENCH_SCALE_STAMPS`` names (one ``write`` each, so concurrent writers do not interleave).
"""

from __future__ import annotations

import os

from bench.common.stamps import append_stamp
from surehand.agents.context import EffectResult, SessionContext


def record(task: str, what: str, at: float | None = None) -> None:
    """Append one stamp to ``BENCH_SCALE_STAMPS`` (nothing if it is not set)."""
    path = os.environ.get("BENCH_SCALE_STAMPS")
    if path:
        append_stamp(path, task, what, at)


def sleeping(ctx: SessionContext) -> str:
    """Wait the seconds the TASK body names (cancellably: a lost lease ends the wait)."""
    record(ctx.task.task_id, "running")
    ctx.wait_cancelled(float(ctx.task.fields.body or "0"))
    return "slept"


def probe(ctx: SessionContext) -> str:
    """Stamp on start, record one operation, stamp once it is recorded."""
    record(ctx.task.task_id, "running")
    ctx.operation(
        "bench_effect",
        {"task_id": ctx.task.task_id},
        lambda: EffectResult(value="done", external_receipt=None),
        idempotency_key=f"{ctx.task.task_id}:effect",
        retry_policy="keyed",
    )
    record(ctx.task.task_id, "effect")
    return "probed"


def noop(ctx: SessionContext) -> str:
    """Stamp and return at once."""
    record(ctx.task.task_id, "noop")
    return "ok"
