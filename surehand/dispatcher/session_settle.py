"""How a session settles: the agent's return recorded first, then the REPORT, the move and the
end of the attempt (what a settle writes: :mod:`.settling`), each write fenced by the
session's epoch and repeat-safe (:meth:`Session.retrying`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from surehand.crashpoints import CrashPoint, crash_point
from surehand.dispatcher import settling
from surehand.dispatcher.reports import jsonable, report_body
from surehand.errors import EffectLeftOpen, StaleOwner
from surehand.model import Action, AttemptState, Bucket, OperationState, ReportStatus, Task
from surehand.store import attempts, operations

if TYPE_CHECKING:
    from surehand.dispatcher.sessions import Session


def settle(session: Session, result: Any, *, to_review: bool) -> Task:
    """The agent returned ``result``: record the return, write it as the REPORT, move the
    TASK to ``review`` (``to_review``) or straight to ``done``, and end the attempt as
    succeeded. The one way a session settles (what it writes: :mod:`.settling`).

    The return is fenced and recorded first. If the attempt recorded operations, the
    return commits on its own before the REPORT is written: admission then reads "all
    settled and the agent returned" and writes the REPORT from records instead of running
    the agent again (RA-7). Without operations, admission answers ``reexecute`` whether or
    not the return was recorded, so the return, the REPORT, the move and the end of the
    attempt commit together -- as one statement on Postgres when the common case holds.

    Repeated while the store cannot confirm it (see :meth:`Session.retrying`): a repeat first
    looks whether the earlier try committed (this attempt succeeded), and then returns the
    TASK as settled and writes nothing.
    """
    return session.retrying(
        "settle",
        lambda repeat: (
            (_settled_before(session) if repeat else None)
            or _settle_try(session, result, to_review)
        ),
    )


def _settled_before(session: Session) -> Task | None:
    with session.services.store.snapshot() as connection:
        mine = attempts.get(connection, session.attempt.attempt_id)
        if mine is None or mine.state is not AttemptState.SUCCEEDED:
            return None
        return session.current_task(connection)


def _settle_try(session: Session, result: Any, to_review: bool) -> Task:
    """One try of :func:`settle`: the one-write settle, else the general path."""
    settlement = settling.Settlement(
        attempt=session.attempt,
        request=session.report_request(report_body(result), ReportStatus.DONE, None),
        returned=jsonable(result),
        action=Action.SUBMIT if to_review else Action.FINISH,
        end=settling.AttemptEnd(AttemptState.SUCCEEDED, session.services.clock.now()),
    )
    settled = settling.write_at_once(session.services, session.task, settlement)
    if settled is None:
        settled = _return_then_settle(session, settlement)
    if settled is None:  # the return committed alone: the attempt has operations
        crash_point(CrashPoint.SESSION_AFTER_RETURN)
        _refuse_open_intents(session)
        with session.fenced("settle") as connection:
            settled = _settle_in(session, connection, settlement)
    return settled


def _return_then_settle(session: Session, settlement: settling.Settlement) -> Task | None:
    """Fence and record the return; without operations, settle in the same transaction
    and return the TASK. With operations, commit the return alone and return None."""
    try:
        with session.services.store.transaction() as connection:
            has_operations = attempts.fence_and_record_return(
                connection, session.attempt.fence, settlement.returned
            )
            if has_operations is None:
                raise StaleOwner(session.stale_message("record_return"))
            if not has_operations:
                return _settle_in(session, connection, settlement)
    except StaleOwner:
        session.record_stale("record_return")
        raise
    return None


def _settle_in(session: Session, connection: Connection, settlement: settling.Settlement) -> Task:
    moved = settling.write_in(connection, session.services, settlement)
    # The general path's move to done may have queued dependants (lifecycle.apply); the
    # one-write settle is refused for a TASK that has any.
    session.may_release = moved.bucket is Bucket.DONE
    return moved


def _refuse_open_intents(session: Session) -> None:
    """A return is no clean end while an effect the agent began has no outcome: raise
    ``EffectLeftOpen`` naming them (the runner ends the attempt ``agent_failed`` with its
    case, and admission holds it: the effect fact is unknown). The return stays recorded,
    so a review ``present`` writes the REPORT from records, with the agent's result."""
    with session.services.store.snapshot() as connection:
        left = [
            op
            for op in operations.for_attempt(connection, session.attempt.attempt_id)
            if op.state is OperationState.INTENT
        ]
    if left:
        named = ", ".join(f"operation {op.operation_id} {op.name!r}" for op in left)
        raise EffectLeftOpen(
            f"the agent returned with {named} begun and never ended (effect_begin without "
            "effect_end): whether it happened is unknown, so the TASK is held for review",
            operation_ids=[op.operation_id for op in left],
        )
