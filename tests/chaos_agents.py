"""Agent handlers for the worker processes of ``test_chaos.py`` and
``test_chaos_deployment.py``.

Workers load them with ``SUREHAND_AGENTS=DEV=tests.chaos_agents:<name>`` (started from the
repository root). Every effect appends one JSON line to the file named by ``CHAOS_EFFECTS``, the
way an external system would keep its own record, so a test counts effects (and sees the key
each one was given) independently of surehand's records. Kill points come from
``SUREHAND_CRASH_AT`` in the worker's environment (see ``surehand.crashpoints``).

This module must stay cheap to import and must not import the test suite.
"""

from __future__ import annotations

import json
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

from surehand.agents.context import EffectResult, SessionContext

EFFECTS_ENV = "CHAOS_EFFECTS"
SLEEP_ENV = "CHAOS_SLEEP_SECONDS"
MARKERS_ENV = "CHAOS_MARKERS"
EFFECT_SECONDS_ENV = "CHAOS_EFFECT_SECONDS"
PLAN_PREFIX = "plan:"
PLAN_STEPS = ("unkeyed", "keyed", "rest", "flaky")
TRANSIENT = "API Error: 529 overloaded_error (transient)"


def effects_file() -> Path:
    return Path(os.environ[EFFECTS_ENV])


def read_effects(path: Path, task_id: str | None = None) -> list[dict[str, Any]]:
    """The effects recorded in ``path`` (for ``task_id`` if given), oldest first."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [json.loads(line) for line in lines if line.strip()]
    return [e for e in found if task_id is None or e["task_id"] == task_id]


def _effect(ctx: SessionContext, name: str, key: str | None) -> EffectResult:
    return EffectResult(
        value=_append(ctx, name, key), external_receipt=f"{name}:{ctx.task.task_id}:{key}"
    )


def _append(ctx: SessionContext, name: str, key: str | None) -> dict[str, Any]:
    record = {
        "task_id": ctx.task.task_id,
        "attempt": ctx.attempt.number,
        "name": name,
        "key": key,
        "pid": os.getpid(),
    }
    with effects_file().open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return record


def _sleep_seconds(default: float) -> float:
    return float(os.environ.get(SLEEP_ENV, default))


def _mark(ctx: SessionContext, what: str) -> None:
    directory = os.environ.get(MARKERS_ENV)
    if directory:
        Path(directory, f"{ctx.task.task_id}-{what}-{ctx.attempt.number}").touch()


def one_effect(ctx: SessionContext) -> str:
    """One declared effect without key or probe (the seed's unknowable case when cut)."""
    ctx.operation("append", {"task": ctx.task.task_id}, lambda: _effect(ctx, "append", None))
    return f"appended once for {ctx.task.task_id} in attempt {ctx.attempt.number}"


def keyed_effect(ctx: SessionContext) -> str:
    """One effect with an idempotency key a successor may repeat it with."""
    key = f"{ctx.task.task_id}:charge"
    ctx.operation(
        "charge",
        {"task": ctx.task.task_id},
        lambda: _effect(ctx, "charge", key),
        idempotency_key=key,
        retry_policy="keyed",
    )
    return f"charged with key {key}"


def probed_effect(ctx: SessionContext) -> str:
    """One effect whose happening the ``chaos_ledger`` probe (in the reconciler) can check."""
    ctx.operation(
        "charge",
        {"task": ctx.task.task_id},
        lambda: _effect(ctx, "charge", None),
        probe="chaos_ledger",
    )
    return "charged"


def slow_effect(ctx: SessionContext) -> str:
    """One effect, then several heartbeats of work (stops early only if the lease is lost)."""
    ctx.operation("append", {"task": ctx.task.task_id}, lambda: _effect(ctx, "append", None))
    _mark(ctx, "working")
    if ctx.wait_cancelled(_sleep_seconds(3.0)):
        return "stopped: lease lost"  # the runner does not settle a cancelled session
    return "appended, then worked for a while"


def paused_owner(ctx: SessionContext) -> str:
    """Attempt 1 works for a while without looking at its lease, then declares its effect;
    a successor declares it at once."""
    if ctx.attempt.number == 1:
        _mark(ctx, "started")
        time.sleep(_sleep_seconds(1.0))  # a process paused here wakes up straight into the write
    ctx.operation("append", {"task": ctx.task.task_id}, lambda: _effect(ctx, "append", None))
    return f"appended in attempt {ctx.attempt.number}"


def plan_body(steps: list[str]) -> str:
    """A TASK body that tells ``mixed_effects`` which steps to take, in order."""
    unknown = sorted(set(steps) - set(PLAN_STEPS))
    if unknown:
        raise ValueError(f"unknown plan steps {unknown}; expected some of {PLAN_STEPS}")
    return f"Work through the plan and report.\n{PLAN_PREFIX} {','.join(steps)}"


def _plan(body: str) -> list[str]:
    for line in reversed(body.splitlines()):
        if line.startswith(PLAN_PREFIX):
            return [step.strip() for step in line.removeprefix(PLAN_PREFIX).split(",")]
    return []


def _slow_effect(ctx: SessionContext, name: str, key: str | None) -> EffectResult:
    """The effect lands (ledger line) first, then the far side takes a while to answer: a
    session cut during that wait leaves an open intent whose effect ran."""
    record = _append(ctx, name, key)
    time.sleep(float(os.environ.get(EFFECT_SECONDS_ENV, 0.2)))
    return EffectResult(value=record, external_receipt=f"{name}:{ctx.task.task_id}:{key}")


def mixed_effects(ctx: SessionContext) -> str:
    """Steps named by the TASK body's ``plan:`` line (see ``plan_body``), each after a short
    rest: ``unkeyed`` (an effect with neither key nor probe), ``keyed`` (an effect a successor
    may repeat with its recorded key), ``rest`` (work without any effect) and ``flaky`` (the
    first attempt fails there, as on a model API's 529). No intent names a probe. Stops early,
    unsettled, once the session lost its lease."""
    rest = _sleep_seconds(0.2)
    task_id = ctx.task.task_id
    for n, step in enumerate(_plan(ctx.task.fields.body)):
        if ctx.wait_cancelled(rest):
            return "stopped: lease lost"
        name = f"{step}-{n}"
        if step == "flaky" and ctx.attempt.number == 1:
            raise RuntimeError(TRANSIENT)  # a model API's blip: retried on the evidence
        if step == "unkeyed":
            ctx.operation(name, {"task": task_id}, partial(_slow_effect, ctx, name, None))
        elif step == "keyed":
            key = f"{task_id}:{name}"
            ctx.operation(
                name,
                {"task": task_id},
                partial(_slow_effect, ctx, name, key),
                idempotency_key=key,
                retry_policy="keyed",
            )
    return f"plan done in attempt {ctx.attempt.number}"


def partitioned_owner(ctx: SessionContext) -> str:
    """Attempt 1 waits until its session is told it lost the lease, then tries its effect
    anyway (refused, marked ``refused``); a successor runs the effect at once."""
    if ctx.attempt.number == 1:
        _mark(ctx, "started")
        ctx.wait_cancelled(_sleep_seconds(60.0))
        try:
            _append_once(ctx)
        except Exception:
            _mark(ctx, "refused")
            raise
    else:
        _append_once(ctx)
    return f"appended in attempt {ctx.attempt.number}"


def _append_once(ctx: SessionContext) -> None:
    ctx.operation("append", {"task": ctx.task.task_id}, lambda: _effect(ctx, "append", None))
