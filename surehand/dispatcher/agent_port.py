"""The agent's view of the service layer for one session: what ``ctx.operation``,
``ctx.report``, ``ctx.delegate`` and ``ctx.wait_for`` reach (the ``SessionPort``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from surehand.dispatcher import delegation
from surehand.dispatcher.operations import run_operation
from surehand.dispatcher.sessions import Session
from surehand.errors import LeaseLost
from surehand.model import ReportStatus, RetryPolicy, WriteReportResult, WriteTaskResult


class AgentPort:
    """Implements SessionPort for one session (the agent's view of the service layer): what
    the runner hands an agent as ``SessionContext.port``. Public so that a caller driving a
    claimed session's agent calls itself (the protocol explorers, ``tests/explore_protocol.py``)
    goes through the same checks as an agent does.

    Once the session lost its lease, the port refuses new operations and reports with
    ``LeaseLost``: that is how an agent that never looks at ``ctx.cancelled`` is stopped
    before its next side effect, not after it.
    """

    def __init__(self, session: Session) -> None:
        self.session = session

    def _check_live(self, write: str) -> None:
        if self.session.cancelled.is_set():
            self.session.refuse_late(write)
            stopped = self.session.stop_cause
            what = f"stopped ({stopped[1]})" if stopped is not None else "lost its lease"
            raise LeaseLost(
                f"{write} refused: the session of {self.session.task_id} {what}",
                task_id=self.session.task_id,
                attempt_id=self.session.attempt.attempt_id,
            )

    def operation(
        self,
        name: str,
        args: Mapping[str, Any],
        effect: Callable[[], Any],
        *,
        idempotency_key: str | None,
        retry_policy: RetryPolicy,
        probe: str | None,
        probe_args: Mapping[str, Any] | None = None,
    ) -> Any:
        self._check_live(f"operation {name!r}")
        return run_operation(
            self.session,
            name,
            args,
            effect,
            idempotency_key=idempotency_key,
            retry_policy=retry_policy,
            probe=probe,
            probe_args=probe_args,
        )

    def report(
        self, body: str, status: ReportStatus, submission_id: str | None
    ) -> WriteReportResult:
        self._check_live("report")
        return self.session.report(body, status, submission_id)

    def delegate(self, arguments: Mapping[str, Any]) -> WriteTaskResult:
        self._check_live("delegate")
        return delegation.delegate(self.session, arguments)

    def wait_for(self, children: Sequence[str]) -> dict[str, Any]:
        self._check_live("wait_for")
        return delegation.wait_for(self.session, children)

    def children(self) -> list[dict[str, Any]]:
        return delegation.children(self.session)
