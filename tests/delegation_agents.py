"""Agents for ``tests/processes/test_delegation_workers.py``, loaded by real worker processes
through ``SUREHAND_AGENTS=PM=tests.delegation_agents:pm,DEV=...:dev,QA=...:qa``.

Each appends one JSON line per thing it did to the file named by ``DELEGATION_LEDGER``, the
agents' own record (never surehand's). The PM delegates DEV and QA (QA after DEV) and waits
for them, then reports their REPORTs; DEV builds (one declared effect); QA records the bucket
its dependency was in when it started.

This module must stay cheap to import and must not import the test suite.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from surehand import Surehand
from surehand.agents.context import SessionContext

LEDGER_ENV = "DELEGATION_LEDGER"

sh = Surehand.from_env()


def ledger(path: Path | None = None) -> list[dict[str, Any]]:
    """Every line the agents wrote (DELEGATION_LEDGER)."""
    path = path or Path(os.environ[LEDGER_ENV])
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.strip()]


def _write(record: dict[str, Any]) -> dict[str, Any]:
    with Path(os.environ[LEDGER_ENV]).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return record


def pm(ctx: SessionContext) -> str:
    """Delegate DEV, then QA after DEV (writing down every answer), and wait for them without
    a worker; once both are done, report what they reported."""
    children = ctx.children()
    if len(children) == 2 and all(c["bucket"] == "done" for c in children):
        _write({"agent": "PM", "attempt": ctx.attempt.number, "resumed": True})
        return "\n".join(f"{c['recipient']}: {c['report']}" for c in children)
    dev = ctx.delegate("DEV", "Build the login fix", "Fix the login.", key="dev")
    _write({"agent": "PM", "attempt": ctx.attempt.number, "key": "dev", **_answer(dev)})
    assert dev.task_id is not None
    qa = ctx.delegate("QA", "Test the login fix", "Test it.", key="qa", depends_on=[dev.task_id])
    _write({"agent": "PM", "attempt": ctx.attempt.number, "key": "qa", **_answer(qa)})
    ctx.wait_for()
    return "waiting"


def _answer(result: Any) -> dict[str, Any]:
    return {"disposition": result.disposition.value, "task_id": result.task_id}


def dev(ctx: SessionContext) -> str:
    """One declared effect, the build, keyed: a successor may repeat it when it was
    interrupted before its outcome was recorded."""
    record = {"agent": "DEV", "task_id": ctx.task.task_id, "attempt": ctx.attempt.number}
    ctx.operation(
        "build",
        {"task": ctx.task.task_id},
        lambda: _write(record),
        idempotency_key=f"build:{ctx.task.task_id}",
        retry_policy="keyed",
    )
    return "built on branch fix-login"


def qa(ctx: SessionContext) -> str:
    """Write down in which bucket each dependency was when QA started."""
    seen = {d: sh.get_task(d).bucket.value for d in ctx.task.fields.depends_on}
    _write({"agent": "QA", "task_id": ctx.task.task_id, "dependencies": seen})
    return "all 12 tests pass"
