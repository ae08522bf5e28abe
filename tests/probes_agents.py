"""An agents module with probes, as an operator writes one, for ``test_probes*.py``.

Processes load it the documented ways: ``SUREHAND_AGENTS=DEV=tests.probes_agents:charge`` (whose
``@sh.probe("ledger_by_decorator")`` registers in the loading process too) and
``SUREHAND_PROBES=ledger_by_setting=tests.probes_agents:ledger``. Each effect appends one JSON
line to the file named by ``PROBES_EFFECTS``, the way an external ledger keeps its own record;
the probes read that file, never surehand's records. ``PROBE_NAME`` picks the probe the
``charge`` operation names.

This module must stay cheap to import and must not import the test suite.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from surehand import Surehand
from surehand.agents.context import EffectResult, SessionContext
from surehand.model import Operation

EFFECTS_ENV = "PROBES_EFFECTS"
PROBE_ENV = "PROBE_NAME"

sh = Surehand.from_env()


def charged(task_id: str, ledger_file: Path | None = None) -> list[int]:
    """The attempts that charged ``task_id``, from the ledger file (PROBES_EFFECTS)."""
    path = ledger_file or Path(os.environ[EFFECTS_ENV])
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    found = [json.loads(line) for line in lines if line.strip()]
    return [int(e["attempt"]) for e in found if e["task_id"] == task_id]


def ledger(operation: Operation) -> bool:
    """Did the interrupted charge reach the ledger? (registered through SUREHAND_PROBES)"""
    return bool(charged(operation.task_id))


@sh.probe("ledger_by_decorator")
def ledger_by_decorator(operation: Operation) -> bool:
    """The same question, registered with ``@sh.probe`` beside the agent."""
    return ledger(operation)


def _charge(ctx: SessionContext) -> EffectResult:
    record = {"task_id": ctx.task.task_id, "attempt": ctx.attempt.number, "pid": os.getpid()}
    with Path(os.environ[EFFECTS_ENV]).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return EffectResult(value=record, external_receipt=f"charge:{ctx.task.task_id}")


def charge(ctx: SessionContext) -> str:
    """One unkeyed effect whose happening the probe named by PROBE_NAME can check."""
    probe = os.environ.get(PROBE_ENV, "ledger_by_decorator")
    ctx.operation("charge", {"task": ctx.task.task_id}, lambda: _charge(ctx), probe=probe)
    return f"charged in attempt {ctx.attempt.number}"
