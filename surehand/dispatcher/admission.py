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
from records (``reconcile_only``), or a hold on the still-``active`` TASK. The probes' evidence:
:mod:`.admission_probes`; the decision recorded and applied: :mod:`.admission_apply`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from surehand.dispatcher.admission_apply import decide, read_task
from surehand.dispatcher.admission_probes import ProbeLookup, run_probes
from surehand.dispatcher.context import Services
from surehand.dispatcher.effects import Evidence, evaluate, with_probes
from surehand.dispatcher.retry import RetryInputs, consider, is_retry
from surehand.dispatcher.retry import streak as abnormal_streak
from surehand.dispatcher.stops import after_stop
from surehand.errors import CaseNotFound, LeaseUnavailable
from surehand.model import (
    Admission,
    Attempt,
    EffectFact,
    InterruptionCase,
    Task,
)
from surehand.queue.leases import LeaseStore
from surehand.store import attempts, cases, operations


class Unset(enum.Enum):
    ANY = "any"  # the caller saw no particular decision


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
            return decide(
                self.services,
                case,
                task,
                Evidence(EffectFact.UNKNOWN, Admission.NOT_ADMITTED, {"lease": "live"}),
                decided_by,
                principal,
            )
        unregistered, asked = run_probes(self.services, self.probe, attempt)
        with self.services.store.snapshot() as connection:
            recorded = operations.for_attempt(connection, attempt.attempt_id)
            task = read_task(connection, case.task_id)
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
        return decide(self.services, case, task, evidence, decided_by, principal)

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
            return case, read_task(connection, case.task_id), attempt

    def _owner_live(self, case: InterruptionCase) -> bool:
        try:
            return self.leases.holder(case.task_id) == case.interrupted_attempt_id
        except LeaseUnavailable:
            # Without Redis we cannot tell; assume the owner may live (never guess the other way).
            return True


def _still_waiting(case: InterruptionCase, evidence: Evidence) -> bool:
    """The case already records this very wait: recording it again each pass adds nothing."""
    return (
        evidence.admission is Admission.NOT_ADMITTED
        and case.admission is Admission.NOT_ADMITTED
        and case.effect_refs.get("why") == evidence.refs.get("why")
        and "unregistered_probes" in evidence.refs
    )
