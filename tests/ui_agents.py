"""The agent of the browser test (``test_ui_browser.py``), loaded by ``surehand up`` through
``SUREHAND_AGENTS=DEV=tests.ui_agents:charge``.

It declares one effect without an idempotency key or a probe, so that an interruption while
it runs leaves an open intent no record can settle: ``hold_for_review``. On its first attempt
the effect records that it started and then never returns (the test kills ``surehand up``
there); on later attempts it runs and returns. Each start appends a JSON line to the file
named by ``UI_EFFECTS``, as an external ledger would.

This module must stay cheap to import and must not import the test suite.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from surehand.agents.context import SessionContext

EFFECTS_ENV = "UI_EFFECTS"


def started(ledger: Path) -> list[int]:
    """The attempts whose effect started, from the ledger file."""
    lines = ledger.read_text(encoding="utf-8").splitlines() if ledger.exists() else []
    return [int(json.loads(line)["attempt"]) for line in lines if line.strip()]


def charge(ctx: SessionContext) -> str:
    """Charge the invoice the TASK names; attempt 1 hangs inside the effect."""

    def effect() -> str:
        with Path(os.environ[EFFECTS_ENV]).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"task_id": ctx.task.task_id, "attempt": ctx.attempt.number}))
            handle.write("\n")
        if ctx.attempt.number == 1:
            threading.Event().wait()  # interrupted here: the process is killed
        return "charged"

    ctx.operation("charge", {"invoice": ctx.task.fields.subject}, effect)
    return f"Charged on attempt {ctx.attempt.number}."
