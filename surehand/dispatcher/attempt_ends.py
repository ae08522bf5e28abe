"""How a session's attempt ends other than by a settle: the agent raised (``fail``), the
runtime could not record or renew (``interrupt``), the claim is undone before any work
(``rollback``), or the agent waits for its children (``wait_in``). Each end is fenced by the
session's epoch; a failed or interrupted attempt opens its interruption case in the same
transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from surehand.dispatcher import lifecycle, settling
from surehand.dispatcher.reports import jsonable
from surehand.errors import SessionInterrupted
from surehand.model import SYSTEM, Action, AttemptCause, AttemptState, Task, case_id_for
from surehand.store import attempts, cases

if TYPE_CHECKING:
    from surehand.dispatcher.sessions import Session

NOT_RETURNED: Any = object()  # the agent did not return (None is a result it may return)


def rollback(session: Session, why: str) -> None:
    """Undo a claim whose session never started work (e.g. its lease stayed taken): the
    attempt fails and the TASK goes back to ``inbox``, unpublished, for the sweep."""
    with session.fenced("rollback") as connection:
        move = lifecycle.Move(
            Action.ROLLBACK,
            by=SYSTEM,
            now=session.services.clock.now(),
            reason=why,
            fence=session.attempt.fence,
            unpublished=True,
        )
        lifecycle.apply(connection, session.current_task(connection), move)
        _end(session, connection, AttemptState.FAILED, why, AttemptCause.NOT_STARTED)


def wait_in(session: Session, connection: Connection, waiting_for: Sequence[str]) -> Task:
    """End this attempt as having returned to wait for ``waiting_for`` (child TASKs): the
    TASK goes back to ``inbox``, unpublished, and the attempt succeeds -- in the caller's
    fenced transaction, which also records what it waits for
    (:func:`surehand.dispatcher.delegation.wait_for`)."""
    why = f"waiting for its children {', '.join(waiting_for)} to be done"
    move = lifecycle.Move(
        Action.WAIT,
        by=SYSTEM,
        now=session.services.clock.now(),
        reason=why,
        fence=session.attempt.fence,
        unpublished=True,
    )
    moved = lifecycle.apply(connection, session.current_task(connection), move)
    _end(session, connection, AttemptState.SUCCEEDED, None, AttemptCause.RETURNED)
    return moved


def fail(session: Session, error: BaseException) -> None:
    """The agent raised: end the attempt ``failed`` (cause ``agent_failed``) and open its
    interruption case in the same transaction. The TASK stays in ``active``; admission
    holds it for its approver, so it is visible and never retried blindly (DESIGN.md
    section 5: no TASK sits in active without a running attempt, an open case or a hold).
    Repeated while the store cannot confirm it, like every session write."""
    why = f"{type(error).__name__}: {error}"
    session.retrying(
        "fail",
        lambda repeat: _end_with_case(
            session,
            AttemptState.FAILED,
            AttemptCause.AGENT_FAILED,
            why,
            write="fail",
            repeat=repeat,
        ),
    )


def interrupt(
    session: Session,
    interruption: SessionInterrupted,
    *,
    returned: Any = NOT_RETURNED,
    repeat: bool = False,
) -> None:
    """The runtime could not record or renew: end the attempt ``interrupted`` with its
    cause and open its case, which admission decides from the effect facts. ``returned``:
    the agent's result, when it returned and only the settle could not be recorded (then
    admission can write the REPORT from records instead of running the agent again).

    One try per call: the caller decides whether to repeat it (``repeat`` True first looks
    whether an earlier try committed). If it fails, the attempt stays ``running`` and the
    reconciler finds it once its lease is gone (one case either way: a case is unique per
    attempt)."""
    _end_with_case(
        session,
        AttemptState.INTERRUPTED,
        AttemptCause(interruption.cause),
        f"{type(interruption).__name__}: {interruption}",
        write="interrupt",
        repeat=repeat,
        returned=returned,
    )


def _end_with_case(
    session: Session,
    state: AttemptState,
    cause: AttemptCause,
    error: str,
    *,
    write: str,
    repeat: bool,
    returned: Any = NOT_RETURNED,
) -> None:
    if repeat and _ended_as(session, state):
        return  # the earlier try committed; only its reply was lost
    with session.fenced(write) as connection:
        if returned is not NOT_RETURNED:
            attempts.record_return(connection, session.attempt.attempt_id, jsonable(returned))
        if session.details:
            attempts.set_details(connection, session.attempt.attempt_id, jsonable(session.details))
        _end(session, connection, state, error, cause)
        _open_case(session, connection)


def _ended_as(session: Session, state: AttemptState) -> bool:
    with session.services.store.snapshot() as connection:
        mine = attempts.get(connection, session.attempt.attempt_id)
    return mine is not None and mine.state is state


def _open_case(session: Session, connection: Connection) -> None:
    # Imported here: recovery imports admission, which imports this module.

    cases.open_case(
        connection,
        case_id=case_id_for(session.attempt),
        task_id=session.task_id,
        attempt_id=session.attempt.attempt_id,
        epoch=session.attempt.number,
        lease_id=session.attempt.lease_id,
        revision=session.current_task(connection).revision,
        now=session.services.clock.now(),
    )


def _end(
    session: Session,
    connection: Connection,
    state: AttemptState,
    error: str | None,
    cause: AttemptCause | None = None,
) -> None:
    end = settling.AttemptEnd(state, session.services.clock.now(), error, cause)
    end.write(connection, session.attempt)
