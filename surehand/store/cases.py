"""Interruption cases: one per lost (or failed) attempt, unique on the interrupted attempt.

A *case* records the interrupted attempt, its epoch (column ``interrupted_epoch``) and the
lease it held, the effect fact, and the admission decision about a successor; an approver's
review of a held case is kept with it (column ``review``).

A decision is written with a compare-and-set on the revision it was evaluated from, so two
admissions racing on one case produce one decision, and a decision taken on an older task
revision can be recognised as stale.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    update,
)

from surehand.model import Admission, CaseState, EffectFact, InterruptionCase, Task
from surehand.store.schema import interruption_cases as cases
from surehand.store.schema import tasks
from surehand.store.task_columns import TASK_COLUMNS, from_row


def _case(row: Row[Any]) -> InterruptionCase:
    return InterruptionCase(
        case_id=row.case_id,
        task_id=row.task_id,
        interrupted_attempt_id=row.interrupted_attempt_id,
        interrupted_epoch=row.interrupted_epoch,
        prior_lease_id=row.prior_lease_id,
        interrupted_at=row.interrupted_at,
        revision_at_interruption=row.revision_at_interruption,
        revision_at_evaluation=row.revision_at_evaluation,
        effect_fact=EffectFact(row.effect_fact) if row.effect_fact else None,
        effect_refs=row.effect_refs or {},
        admission=Admission(row.admission) if row.admission else None,
        decided_at=row.decided_at,
        decided_by=row.decided_by,
        successor_attempt_id=row.successor_attempt_id,
        bound_operation_id=row.bound_operation_id,
        state=CaseState(row.state),
        review=row.review,
        retry_at=row.retry_at,
    )


def open_case(
    connection: Connection,
    *,
    case_id: str,
    task_id: str,
    attempt_id: str,
    epoch: int,
    lease_id: str,
    revision: int,
    now: datetime,
) -> None:
    """Open a case; DuplicateKey if the attempt already has one (a second reconciler)."""
    connection.execute(
        insert(cases).values(
            case_id=case_id,
            task_id=task_id,
            interrupted_attempt_id=attempt_id,
            interrupted_epoch=epoch,
            prior_lease_id=lease_id,
            interrupted_at=now,
            revision_at_interruption=revision,
            effect_refs={},
            state=CaseState.OPEN.value,
        )
    )


def get(connection: Connection, case_id: str) -> InterruptionCase | None:
    row = connection.execute(select(cases).where(cases.c.case_id == case_id)).one_or_none()
    return _case(row) if row is not None else None


def for_attempt(connection: Connection, attempt_id: str) -> InterruptionCase | None:
    row = connection.execute(
        select(cases).where(cases.c.interrupted_attempt_id == attempt_id)
    ).one_or_none()
    return _case(row) if row is not None else None


def for_task(connection: Connection, task_id: str) -> list[InterruptionCase]:
    rows = connection.execute(
        select(cases).where(cases.c.task_id == task_id).order_by(cases.c.interrupted_at)
    ).all()
    return [_case(row) for row in rows]


def listing(
    connection: Connection,
    *,
    state: CaseState | None = None,
    tenant: str | None = None,
    task_id: str | None = None,
    limit: int = 100,
) -> list[InterruptionCase]:
    """Cases newest first; ``tenant`` keeps to that tenant's TASKs (a join, not a scan)."""
    query = select(cases).order_by(cases.c.interrupted_at.desc()).limit(limit)
    if state is not None:
        query = query.where(cases.c.state == state.value)
    if task_id is not None:
        query = query.where(cases.c.task_id == task_id)
    if tenant is not None:
        query = query.join(tasks, tasks.c.task_id == cases.c.task_id).where(
            tasks.c.tenant == tenant
        )
    return [_case(row) for row in connection.execute(query).all()]


_HELD = (
    select(cases, *(column.label(f"t_{column.name}") for column in TASK_COLUMNS))
    .join(tasks, tasks.c.task_id == cases.c.task_id)
    .where(
        # Open held cases are few, a tenant's TASKs many: the plan must start from the partial
        # index on open cases. ``tenant || ''`` keeps the planners from starting at the tenant's
        # TASKs (which a bound tenant looks selective enough for), and literals, not
        # parameters, let SQLite see that the query only wants what the partial index holds.
        tasks.c.tenant.concat("") == bindparam("tenant"),
        cases.c.state == literal_column(f"'{CaseState.OPEN.value}'"),
        cases.c.admission == literal_column(f"'{Admission.HOLD_FOR_REVIEW.value}'"),
    )
    .order_by(tasks.c.priority, cases.c.interrupted_at, cases.c.case_id)
    .limit(bindparam("limit"))
)


def held(
    connection: Connection, *, tenant: str, limit: int = 200
) -> list[tuple[InterruptionCase, Task]]:
    """Open cases held for review with their TASKs, most urgent first: by the TASK's priority
    (P0 first), then the longest waiting. Served by ``ix_interruption_cases_open``."""
    found: list[tuple[InterruptionCase, Task]] = []
    for row in connection.execute(_HELD, {"tenant": tenant, "limit": limit}).all():
        task_row = SimpleNamespace(**{c.name: getattr(row, f"t_{c.name}") for c in TASK_COLUMNS})
        found.append((_case(row), from_row(task_row)))
    return found


def decide(
    connection: Connection,
    case: InterruptionCase,
    *,
    effect_fact: EffectFact,
    effect_refs: Mapping[str, Any],
    admission: Admission,
    revision: int,
    decided_by: str,
    bound_operation_id: int | None,
    resolve: bool,
    now: datetime,
    retry_at: datetime | None = None,
) -> bool:
    """Record a decision if the case is still as it was read (open, same prior decision);
    ``retry_at``: a retry policy's reexecute starts no sooner."""
    result = connection.execute(
        update(cases)
        .where(
            cases.c.case_id == case.case_id,
            cases.c.state == CaseState.OPEN.value,
            _same(cases.c.decided_at, case.decided_at),
        )
        .values(
            effect_fact=effect_fact.value,
            effect_refs=dict(effect_refs),
            admission=admission.value,
            revision_at_evaluation=revision,
            decided_by=decided_by,
            decided_at=now,
            bound_operation_id=bound_operation_id,
            state=(CaseState.RESOLVED if resolve else CaseState.OPEN).value,
            retry_at=retry_at,
        )
    )
    return result.rowcount == 1


def _same(column: Any, value: Any) -> Any:
    return column.is_(None) if value is None else column == value


def set_review(connection: Connection, case_id: str, review: Mapping[str, Any]) -> None:
    connection.execute(update(cases).where(cases.c.case_id == case_id).values(review=dict(review)))


def bind_successor(connection: Connection, case_id: str, attempt_id: str) -> bool:
    """Resolve an admitted ``reexecute`` case with its successor (once)."""
    result = connection.execute(
        update(cases)
        .where(
            cases.c.case_id == case_id,
            cases.c.admission == Admission.REEXECUTE.value,
            cases.c.successor_attempt_id.is_(None),
        )
        .values(successor_attempt_id=attempt_id, state=CaseState.RESOLVED.value)
    )
    return result.rowcount == 1


def count(connection: Connection, task_id: str | None = None) -> int:
    query = select(func.count()).select_from(cases)
    if task_id is not None:
        query = query.where(cases.c.task_id == task_id)
    return int(connection.execute(query).scalar_one())


def set_evaluated_revision(connection: Connection, case_id: str, revision: int) -> None:
    connection.execute(
        update(cases).where(cases.c.case_id == case_id).values(revision_at_evaluation=revision)
    )
