"""Retry on evidence: a role's retry policy, consulted by admission (DESIGN.md section 5).

An attempt whose agent failed (cause ``agent_failed``) or ran out of time (``timed_out``) is
held for its approver by :func:`surehand.dispatcher.effects.evaluate`. Where the evidence says
nothing is open -- no intent recorded, or every intent settled and replayable
(``none_verified``) -- and the agent's effects are *observed* (a Python agent, whose every
effect goes through ``ctx.operation``; the claude preset, whose effectful calls its hooks
journal; a role an operator names in ``SUREHAND_RETRY_DECLARED_ROLES``), the role's policy
turns that hold into a ``reexecute`` due after a backoff, up to ``max_attempts`` in a row.
The due time is stored with the decision (``interruption_cases.retry_at``); the reconciler
publishes the successor once it is due and a claim before it is refused: nobody sleeps.
Past ``max_attempts`` the TASK is held with "gave up after N attempts" and the errors.

An open intent, a review, any other cause: the decision is left as it was.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from surehand.agents.budgets import cost_of, role_budget, spent_reason
from surehand.config import Settings
from surehand.dispatcher.effects import Evidence, by_effects
from surehand.errors import ConfigError
from surehand.model import (
    INTERRUPTED_ENDS,
    Admission,
    Attempt,
    AttemptCause,
    EffectFact,
    InterruptionCase,
    Operation,
    Task,
)
from surehand.roles import per_role

RETRIED = frozenset({AttemptCause.AGENT_FAILED, AttemptCause.TIMED_OUT})
DEFAULT_OBSERVED_ATTEMPTS = 3
# How a model API's overload or rate limit reads in what an agent CLI prints (Claude Code:
# "API Error: 529 ... overloaded_error"; a 429 "rate_limit_error"; Codex: "429 Too Many
# Requests", "exceeded retry limit").
OVERLOAD = re.compile(
    r"\b(529|429)\b|overloaded|rate[ _-]?limit|too many requests|exceeded retry limit", re.I
)
ERRORS_SHOWN = 5  # errors the hold reason quotes (the refs keep every one of the streak)


@dataclass(frozen=True)
class Schedule:
    """A role's retry policy: attempts in a row at most, and the backoff between them."""

    max_attempts: int
    backoff: float
    cap: float
    overload_backoff: float

    def delay(self, retries: int, *, overloaded: bool, jitter: float) -> float:
        """Seconds before retry number ``retries`` (1 for the first): the first backoff (an
        overload's if ``overloaded``) doubled each time, capped, then "equal" jitter: between
        half and all of it (``jitter`` in [0, 1))."""
        base = self.overload_backoff if overloaded else self.backoff
        full = min(self.cap, base * 2.0 ** (retries - 1))
        return full * (0.5 + jitter / 2)


def observed(attempt: Attempt, role: str, settings: Settings) -> bool:
    """Whether the agent's effects were observed: recorded with the attempt by its worker
    (``python``, ``journaled``), or declared for the role by the operator."""
    if (attempt.details or {}).get("observed"):
        return True
    declared = {part.strip() for part in settings.retry_declared_roles.split(",")}
    return role in declared


def schedule_for(settings: Settings, role: str, *, effects_observed: bool) -> Schedule:
    """The role's policy from the settings; one attempt where effects are not observed."""
    attempts = int(_value(settings.retry_max_attempts, "RETRY_MAX_ATTEMPTS", role) or 0)
    return Schedule(
        max_attempts=(attempts or DEFAULT_OBSERVED_ATTEMPTS) if effects_observed else 1,
        backoff=_value(settings.retry_backoff_seconds, "RETRY_BACKOFF_SECONDS", role) or 10.0,
        cap=_value(settings.retry_backoff_max_seconds, "RETRY_BACKOFF_MAX_SECONDS", role) or 600.0,
        overload_backoff=_value(
            settings.retry_overload_backoff_seconds, "RETRY_OVERLOAD_BACKOFF_SECONDS", role
        )
        or 60.0,
    )


def _value(text: str, name: str, role: str) -> float | None:
    setting = f"SUREHAND_{name}"
    default, by_role = per_role(text, setting)
    found = by_role.get(role, default)
    if found is None:
        return None
    try:
        number = float(found)
    except ValueError:
        number = -1.0
    if number < 0 or number != number:
        raise ConfigError(f"{setting}: {found!r} is not a number of at least 0", setting=setting)
    return number


def check_settings(settings: Settings) -> None:
    """ConfigError now (``surehand check``) for a retry setting that cannot be read, for any
    role it names (admission reads them on every decision)."""
    named = {"DEV"}
    for text in (
        settings.retry_max_attempts,
        settings.retry_backoff_seconds,
        settings.retry_backoff_max_seconds,
        settings.retry_overload_backoff_seconds,
    ):
        named |= set(per_role(text, "SUREHAND_RETRY_*")[1])
    for role in named:
        schedule_for(settings, role, effects_observed=True)


def streak(history: Sequence[Attempt]) -> list[Attempt]:
    """The latest attempts, newest first, that ended without a result, up to the first that
    did not (a rolled-back claim that never started work neither counts nor breaks it)."""
    found = []
    for attempt in sorted(history, key=lambda a: a.number, reverse=True):
        if attempt.cause is AttemptCause.NOT_STARTED:
            continue
        if attempt.state not in INTERRUPTED_ENDS:
            break
        found.append(attempt)
    return found


def refused(attempt: Attempt) -> bool:
    """The agent finished but what it produced was refused (a result that is no valid
    REPORT, an output that cannot be read safely): no blip, and a retry would only repeat the
    work for the same end. Held as before."""
    return attempt.agent_returned or bool((attempt.details or {}).get("refused"))


def overloaded(attempt: Attempt) -> bool:
    """The agent's error or output says its model API was overloaded or rate-limited."""
    output = (attempt.details or {}).get("output") or {}
    texts = [attempt.error or "", *(str(v) for v in output.values())]
    return any(OVERLOAD.search(text) for text in texts)


@dataclass(frozen=True)
class RetryInputs:
    """What a retry decision reads besides the evidence."""

    case: InterruptionCase
    attempt: Attempt
    operations: Sequence[Operation]
    history: Sequence[Attempt]
    task: Task
    unregistered: Collection[str] = ()

    @property
    def role(self) -> str:
        return self.task.fields.recipient

    def budget(self, settings: Settings) -> tuple[float, float] | None:
        """What the TASK's attempts spent and its budget (its own, else its role's), USD."""
        limit = self.task.budget_usd
        if limit is None:
            limit = role_budget(settings, self.role)
        return None if limit is None else (cost_of(self.history), limit)


def consider(
    evidence: Evidence,
    inputs: RetryInputs,
    settings: Settings,
    now: datetime,
    jitter: Callable[[], float] = random.random,
) -> Evidence:
    """The decision with the role's retry policy applied (see the module docstring)."""
    attempt = inputs.attempt
    if attempt.cause is AttemptCause.BUDGET_SPENT:
        return _within_budget(evidence, inputs.budget(settings))
    if inputs.case.review is not None or attempt.cause not in RETRIED or refused(attempt):
        return evidence
    plain = by_effects(attempt, inputs.operations, None, inputs.unregistered)
    if plain.fact is not EffectFact.NONE_VERIFIED or plain.admission is not Admission.REEXECUTE:
        return evidence  # something may be open: held as before, never retried
    schedule = schedule_for(
        settings, inputs.role, effects_observed=observed(attempt, inputs.role, settings)
    )
    if schedule.max_attempts <= 1:
        return evidence
    failed = streak(inputs.history)
    errors = [f"attempt {a.number}: {a.error or a.cause or a.state.value}" for a in failed[::-1]]
    if len(failed) >= schedule.max_attempts:
        return _gave_up(plain, failed, errors)
    retry_at = _due(inputs.case, attempt, schedule, len(failed), now, jitter)
    refs = {
        **plain.refs,
        "retry": {
            "attempt": len(failed) + 1,
            "max_attempts": schedule.max_attempts,
            "at": retry_at.isoformat(),
            "overloaded": overloaded(attempt),
            "errors": errors,
        },
    }
    return replace(plain, refs=refs, retry_at=retry_at)


def _due(
    case: InterruptionCase,
    attempt: Attempt,
    schedule: Schedule,
    retries: int,
    now: datetime,
    jitter: Callable[[], float],
) -> datetime:
    """When the retry is due: as first decided for this case (a re-admission on a new
    revision keeps it), else now plus the backoff."""
    if case.retry_at is not None:
        return case.retry_at
    delay = schedule.delay(retries, overloaded=overloaded(attempt), jitter=jitter())
    return now + timedelta(seconds=delay)


def _gave_up(plain: Evidence, failed: Sequence[Attempt], errors: list[str]) -> Evidence:
    shown = errors[-ERRORS_SHOWN:]
    more = f" (and {len(errors) - len(shown)} earlier)" if len(errors) > len(shown) else ""
    why = f"gave up after {len(failed)} attempts: " + "; ".join(shown) + more
    refs = {**plain.refs, "why": why, "retry": {"gave_up": len(failed), "errors": errors}}
    return Evidence(plain.fact, Admission.HOLD_FOR_REVIEW, refs)


def _within_budget(evidence: Evidence, budget: tuple[float, float] | None) -> Evidence:
    """An attempt stopped by its budget: a successor runs only once the budget was raised
    (an approver's decision); until then the TASK is held with what was spent. An open
    intent holds it as any interruption's would."""
    if evidence.admission is not Admission.REEXECUTE or budget is None:
        return evidence
    spent, limit = budget
    if spent < limit:
        return evidence
    why = spent_reason(spent, limit)
    return Evidence(evidence.fact, Admission.HOLD_FOR_REVIEW, {**evidence.refs, "why": why})


def is_retry(evidence: Evidence) -> bool:
    """A decision this policy made (admission's bound on interruptions does not apply)."""
    return "retry" in evidence.refs
