"""What other test modules need from ``tests/agents/test_command_agent.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import cast

from surehand.agents.context import SessionContext, SessionPort
from surehand.dispatcher.sessions import Session
from surehand.facade import Surehand
from tests.session_helpers import Harness


def command_surehand(harness: Harness, tmp_path: Path, script: str, **settings: object) -> Surehand:
    """A handle whose DEV agent is ``SUREHAND_AGENTS=DEV=command`` running ``script`` (sh)."""
    path = tmp_path / "agent.sh"
    path.write_text(script, encoding="utf-8")
    settings.setdefault("agent_bind", str(tmp_path))  # the script and its markers (/tmp is private)
    return harness.surehand(agents="DEV=command", command_agent=f"sh {path}", **settings)


class _NoPort:
    """The programs here declare no effects and write no reports."""

    def operation(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("not expected")

    report = operation


def attempt_context(
    harness: Harness, session: Session, number: int, cancelled: threading.Event
) -> SessionContext:
    """A context for attempt ``number`` of the claimed session's TASK (1 is the claimed one)."""
    attempt = session.attempt
    if number != attempt.number:
        attempt = dataclasses.replace(attempt, attempt_id=f"{attempt.attempt_id}-{number}")
        attempt = dataclasses.replace(attempt, number=number)
    return SessionContext(
        task=session.task,
        attempt=attempt,
        port=cast(SessionPort, _NoPort()),
        cancelled=cancelled,
        work_dir=harness.work_dir / attempt.attempt_id,
    )
