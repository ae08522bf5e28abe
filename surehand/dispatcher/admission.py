"""Recovery admission: the one function that decides what a successor of an interrupted
attempt may do. Every path that can start a successor (reconciler, ``Surehand.recover``, the
CLI, HTTP and MCP doors) calls :func:`admit`; a session start only consumes its decision.

The decisions (:class:`~surehand.model.Admission`), from the effect facts: ``not_admitted``
(the owner is alive: no successor), ``reexecute`` (run the TASK again as a new attempt),
``reconcile_only`` (every effect settled and the agent returned: write its REPORT from records,
run nothing) and ``hold_for_review`` (an effect's outcome is unknown: hold the TASK until an
approver's review states it).

Order: keep a live owner (``not_admitted``); turn open intents with probes into facts; evaluate
the effect facts (``effects.evaluate``); record the decision with a compare-and-set on the case
and apply it in the same transaction: a successor admission to be claimed, a REPORT written
from records (``reconcile_only``), or a hold on the still-``active`` TASK.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import Connection

from surehand.agents.probes import ProbeResult
from surehand.dispatcher import lifecycle
from surehand.dispatcher.cancel import archive_cancelled
from surehand.dispatcher.context import Services
from surehand.dispatcher.effects import (
    Evidence,
    as_result,
    evaluate,
    is_open,
    observation,
    with_probes,
)
from surehand.dispatcher.reports import report_body, write_report_in
from surehand.dispatcher.retry import RetryInputs, consider, is_retry
from surehand.dispatcher.retry import streak as abnormal_streak
from surehand.dispatcher.stops import after_stop
from surehand.errors import CaseNotFound, LeaseUnavailable, StaleDecision
from surehand.model import (
    SYSTEM,
    Action,
    Admission,
    Attempt,
    CaseState,
    EffectFact,
    EventKind,
    Fence,
    InterruptionCase,
    Operation,
    ReportStatus,
    Task,
)
from surehand.queue.leases import LeaseStore
from surehand.requests import ReportRequest
from surehand.store import attempts, cases, dependencies, events, operations, task_moves, tasks

log = logging.getLogger(__name__)


class Unset(enum.Enum):
    ANY = "any"  # the caller saw no particular decision


ProbeLookup = Callable[[str], Callable[[Operation], "bool | ProbeResult | None"] | None]


@dataclass(frozen=True)
class Admitter:
    """What admission needs beyond the store: lease liveness and named probes."""

    services: Services
    leases: LeaseStore
    probe: ProbeLookup

    def admit(
        self,
        case_id: str,
        *,
        decided_by: str,
        seen_decided_at: datetime | Unset | None = Unset.ANY,
        principal: str | None = None,
    ) -> InterruptionCase:
        """Evaluate the case's evidence and record (and apply) the admission decision.

        ``seen_decided_at`` is the decision the caller saw (None: undecided). If the case was
        decided since — by a concurrent reconciler — that decision stands and is returned as
        it is, so two passes never decide (or hold, or reconcile) one case twice. Without it
        (a review, a recover request) the evidence is always evaluated again. ``principal``:
        the name of the caller whose request (review, recover) this decision answers.
        """
        case, task, attempt = self._load(case_id)
        if seen_decided_at is not Unset.ANY and case.decided_at != seen_decided_at:
            return case
        if self._owner_live(case):
            return self._decide(
                case,
                task,
                Evidence(EffectFact.UNKNOWN, Admission.NOT_ADMITTED, {"lease": "live"}),
                decided_by,
                principal,
            )
        unregistered, asked = self._run_probes(attempt)
        with self.services.store.snapshot() as connection:
            recorded = operations.for_attempt(connection, attempt.attempt_id)
            task = _task(connection, case.task_id)
            history = attempts.for_task(connection, case.task_id)
        evidence = evaluate(attempt, recorded, case.review, unregistered)
        evidence = self._after_wait(case, with_probes(evidence, asked))
        retry = RetryInputs(case, attempt, recorded, history, task, unregistered)
        evidence = consider(evidence, retry, self.services.settings, self.services.clock.now())
        # After the retry policy: a cancel ends even a scheduled retry; an attempt out of time
        # that the policy does not retry is held (dispatcher/stops.py).
        evidence = after_stop(task, attempt, case.review, evidence)
        evidence = self._bounded(case, history, evidence)
        if _still_waiting(case, evidence):
            return case  # recorded on an earlier pass; nothing new to write
        return self._decide(case, task, evidence, decided_by, principal)

    def _after_wait(self, case: InterruptionCase, evidence: Evidence) -> Evidence:
        """A hold that only a probe missing here causes waits for a process that has it.

        Until ``probe_wait_seconds`` after the case opened, the decision is ``not_admitted``
        ("waiting for ..."): nothing starts, no hold is set, and every reconciler pass (in any
        process) admits the case again. After it, the hold names the missing probe.
        """
        missing = evidence.refs.get("unregistered_probes")
        if evidence.admission is not Admission.HOLD_FOR_REVIEW or not missing:
            return evidence
        wait = self.services.settings.probe_wait_seconds
        why = str(evidence.refs.get("why"))
        if self.services.clock.now() >= case.interrupted_at + timedelta(seconds=wait):
            waited = f"{why}; waited {wait:g}s for a process that has it"
            return replace(evidence, refs={**evidence.refs, "why": waited})
        waiting = f"waiting up to {wait:g}s for a process that has it: {why}"
        return Evidence(
            EffectFact.UNKNOWN, Admission.NOT_ADMITTED, {**evidence.refs, "why": waiting}
        )

    def _bounded(
        self, case: InterruptionCase, history: list[Attempt], evidence: Evidence
    ) -> Evidence:
        """A TASK whose last attempts all ended abnormally, ``max_consecutive_interruptions``
        of them in a row, is held for its approver instead of run again: whatever keeps
        ending it (a crashing agent, a bad output, a worker that dies on it) would only run
        the agent and its undeclared effects once more. An approver's review stands."""
        limit = self.services.settings.max_consecutive_interruptions
        if evidence.admission is not Admission.REEXECUTE or case.review or is_retry(evidence):
            return evidence  # a retry policy bounds its own attempts
        streak = abnormal_streak(history)
        if len(streak) < limit:
            return evidence
        causes = ", ".join(
            f"{a.number}: {a.cause.value if a.cause else a.state.value}" for a in streak
        )
        why = (
            f"the last {len(streak)} attempts ended without a result ({causes}); held instead "
            "of running the agent again (SUREHAND_MAX_CONSECUTIVE_INTERRUPTIONS)"
        )
        return Evidence(evidence.fact, Admission.HOLD_FOR_REVIEW, {**evidence.refs, "why": why})

    def _load(self, case_id: str) -> tuple[InterruptionCase, Task, Attempt]:
        with self.services.store.snapshot() as connection:
            case = cases.get(connection, case_id)
            if case is None:
                raise CaseNotFound(f"no interruption case {case_id}; `surehand cases` lists them")
            attempt = attempts.get(connection, case.interrupted_attempt_id)
            assert attempt is not None
            return case, _task(connection, case.task_id), attempt

    def _owner_live(self, case: InterruptionCase) -> bool:
        try:
            return self.leases.holder(case.task_id) == case.interrupted_attempt_id
        except LeaseUnavailable:
            # Without Redis we cannot tell; assume the owner may live (never guess the other way).
            return True

    def _run_probes(self, attempt: Attempt) -> tuple[frozenset[str], list[dict[str, object]]]:
        """Ask each open intent's probe whether its effect happened; record definite answers
        (with what the probe saw) on the operation.

        Returns the probes that open intents name but this process does not have (those were
        never asked, which is not the same as an inconclusive answer), and each answer given.
        """
        with self.services.store.snapshot() as connection:
            pending = [
                op
                for op in operations.for_attempt(connection, attempt.attempt_id)
                if is_open(op) and op.probe
            ]
        unregistered = {op.probe for op in pending if op.probe and self.probe(op.probe) is None}
        asked: list[dict[str, object]] = []
        started = self.services.clock.now()
        for op in pending:
            if op.probe in unregistered:
                _log_unregistered(op)
                continue
            result = self._ask_within(op, (self.services.clock.now() - started).total_seconds())
            asked.append(observation(op, result))
            if result.present is None:
                continue
            with self.services.store.transaction() as connection:
                operations.confirm(
                    connection,
                    op.operation_id,
                    present=result.present,
                    source=_probe_source(op, result),
                    now=self.services.clock.now(),
                )
        return frozenset(name for name in unregistered if name), asked

    def _ask_within(self, op: Operation, spent: float) -> ProbeResult:
        """The probe's answer, unless this admission's probes already took their bound (an
        agent declaring many slow probes must not hold a reconciler pass): then unknown."""
        bound = self.services.settings.probe_total_seconds
        if spent < bound:
            return self._ask(op)
        why = (
            f"not asked: this admission's probes took {spent:.0f} s of their "
            f"SUREHAND_PROBE_TOTAL_SECONDS={bound:g}"
        )
        return ProbeResult(None, {"why": why})

    def _ask(self, op: Operation) -> ProbeResult:
        probe = self.probe(op.probe or "")
        assert probe is not None  # unregistered probes are not asked (``_run_probes``)
        try:
            return as_result(probe(op))
        except Exception as error:
            log.exception("probe %r raised; treating the effect as unknown", op.probe)
            return ProbeResult(None, {"why": f"the probe raised {type(error).__name__}"})

    def _decide(
        self,
        case: InterruptionCase,
        task: Task,
        evidence: Evidence,
        decided_by: str,
        principal: str | None = None,
    ) -> InterruptionCase:
        now = self.services.clock.now()
        resolve = evidence.admission is Admission.RECONCILE_ONLY
        with self.services.store.transaction() as connection:
            # Decisions on one TASK take turns (row lock), and a decision recorded meanwhile by
            # a concurrent admission (a second reconciler) stands: it is returned, not redone.
            current = tasks.get_for_update(connection, task.task_id)
            assert current is not None
            recorded = _reread(connection, case.case_id)
            if recorded.state is not CaseState.OPEN or recorded.decided_at != case.decided_at:
                return recorded
            if current.revision != task.revision:
                raise StaleDecision(
                    f"{task.task_id} changed while case {case.case_id} was evaluated; "
                    "admission runs again on the new revision"
                )
            if not cases.decide(
                connection,
                case,
                effect_fact=evidence.fact,
                effect_refs=evidence.refs,
                admission=evidence.admission,
                revision=task.revision,
                decided_by=decided_by,
                bound_operation_id=evidence.bound_operation_id,
                resolve=resolve,
                now=now,
                retry_at=evidence.retry_at,
            ):
                # Another admission decided first; its decision stands.
                return _reread(connection, case.case_id)
            _audit(connection, case, task, evidence, (decided_by, principal), now)
            self._apply(connection, case, task, evidence)
            # The decision is fenced on the revision the TASK has once it is applied: any later
            # change makes it stale, and a successor claim re-checks it.
            cases.set_evaluated_revision(
                connection, case.case_id, _task(connection, task.task_id).revision
            )
            return _reread(connection, case.case_id)

    def _apply(
        self, connection: Connection, case: InterruptionCase, task: Task, evidence: Evidence
    ) -> None:
        if evidence.admission is Admission.HOLD_FOR_REVIEW:
            _hold(connection, self.services, case, task, evidence)
        elif evidence.admission is Admission.RECONCILE_ONLY and evidence.refs.get("cancelled"):
            _cancel(connection, self.services, case, task)
        elif evidence.admission is Admission.RECONCILE_ONLY:
            _reconcile(connection, self.services, case, task)
        elif evidence.admission is Admission.REEXECUTE and task.hold is not None:
            _release_hold(connection, self.services, task)


def _still_waiting(case: InterruptionCase, evidence: Evidence) -> bool:
    """The case already records this very wait: recording it again each pass adds nothing."""
    return (
        evidence.admission is Admission.NOT_ADMITTED
        and case.admission is Admission.NOT_ADMITTED
        and case.effect_refs.get("why") == evidence.refs.get("why")
        and "unregistered_probes" in evidence.refs
    )


def _log_unregistered(op: Operation) -> None:
    log.warning(
        "probe %r is not registered in this process; operation %s was not asked. Register it "
        "in the workers (SUREHAND_PROBES=%s=module:function, or @sh.probe in the agents module)",
        op.probe,
        op.operation_id,
        op.probe,
    )


def _task(connection: Connection, task_id: str) -> Task:
    task = tasks.get(connection, task_id)
    assert task is not None
    return task


def _reread(connection: Connection, case_id: str) -> InterruptionCase:
    case = cases.get(connection, case_id)
    assert case is not None
    return case


def _audit(
    connection: Connection,
    case: InterruptionCase,
    task: Task,
    evidence: Evidence,
    decided: tuple[str, str | None],
    now: datetime,
) -> None:
    """The ADMISSION event; ``decided``: the deciding role and the principal's name, if any."""
    events.insert(
        connection,
        events.row(
            task_id=case.task_id,
            kind=EventKind.ADMISSION,
            by=decided[0],
            principal=decided[1],
            at=now,
            attempt_id=case.interrupted_attempt_id,
            epoch=case.interrupted_epoch,
            data={
                "case_id": case.case_id,
                "effect_fact": evidence.fact.value,
                "admission": evidence.admission.value,
                "revision": task.revision,
                "bound_operation_id": evidence.bound_operation_id,
                "inputs": dict(evidence.refs),
            },
        ),
    )


def _hold(
    connection: Connection,
    services: Services,
    case: InterruptionCase,
    task: Task,
    evidence: Evidence,
) -> None:
    reason = f"effect {evidence.fact.value}: {evidence.refs.get('why', 'needs review')}"
    now = services.clock.now()
    if not task_moves.update_if(
        connection,
        task.task_id,
        expect={"revision": task.revision},
        values={"hold_case_id": case.case_id, "hold_reason": reason},
        now=now,
    ):
        raise StaleDecision(f"{task.task_id} changed while its hold was being set")
    events.insert(
        connection,
        events.row(
            task_id=task.task_id,
            kind=EventKind.HOLD,
            by=SYSTEM,
            at=now,
            reason=reason,
            data={"case_id": case.case_id},
        ),
    )
    # A parent waiting for this TASK runs again now, to decide with the hold in its brief.
    dependencies.release_waiting_parent(connection, task, now)


def _reconcile(
    connection: Connection, services: Services, case: InterruptionCase, task: Task
) -> None:
    """Write the REPORT from the records and submit the TASK for review; nothing re-runs."""
    attempt = attempts.get(connection, case.interrupted_attempt_id)
    assert attempt is not None
    body = _reconciled_body(connection, case, attempt)
    request = ReportRequest(
        task_id=task.task_id, reporter=task.fields.recipient, body=body, status=ReportStatus.DONE
    )
    if task.hold is not None:
        task = _release_hold(connection, services, task)
    written = write_report_in(connection, services, task, request, attempt_id=attempt.attempt_id)
    move = lifecycle.Move(
        Action.SUBMIT,
        by=SYSTEM,
        now=services.clock.now(),
        report_id=written.report.report_id,
        fence=Fence(attempt.attempt_id, task.task_id, attempt.number),
        fencing=lifecycle.Fencing.RECORDED,
    )
    lifecycle.apply(connection, _task(connection, task.task_id), move)


def _cancel(connection: Connection, services: Services, case: InterruptionCase, task: Task) -> None:
    """Archive a cancelled TASK with a REPORT from the records; nothing runs again."""
    if task.hold is not None:
        task = _release_hold(connection, services, task)
    archive_cancelled(connection, services, task, case=case, by=SYSTEM)


def _release_hold(connection: Connection, services: Services, task: Task) -> Task:
    assert task.hold is not None
    now = services.clock.now()
    task_moves.update_if(
        connection,
        task.task_id,
        expect={"hold_case_id": task.hold.case_id},
        values={"hold_case_id": None, "hold_reason": None},
        now=now,
    )
    events.insert(
        connection,
        events.row(
            task_id=task.task_id,
            kind=EventKind.HOLD_RELEASED,
            by=SYSTEM,
            at=now,
            data={"case_id": task.hold.case_id},
        ),
    )
    return _task(connection, task.task_id)


def _reconciled_body(connection: Connection, case: InterruptionCase, attempt: Attempt) -> str:
    recorded = operations.for_attempt(connection, attempt.attempt_id)
    lines = [
        f"Reconciled from records after attempt {attempt.number} was interrupted "
        f"(case {case.case_id}); no effect was repeated.",
        "",
    ]
    if attempt.agent_returned:
        lines += ["Agent result:", report_body(attempt.result), ""]
    if case.review:
        lines += [f"Review: effect {case.review.get('effect')} — {case.review.get('note', '')}", ""]
    lines += ["Operations:"] + [
        f"- {op.name} [{op.state.value}] key={op.idempotency_key} receipt={op.external_receipt}"
        for op in recorded
    ]
    return "\n".join(lines)


def _probe_source(op: Operation, result: ProbeResult) -> dict[str, object]:
    """Who established an effect (``probe:NAME``) and what it saw, kept on the operation."""
    source: dict[str, object] = {"source": f"probe:{op.probe}"}
    return {**source, "saw": dict(result.saw)} if result.saw else source
