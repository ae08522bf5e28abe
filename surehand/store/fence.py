"""The fence, in one place: when may an attempt write for its TASK?

The *epoch* is the number of a TASK's current attempt: a claim raises it by one, so a
superseded attempt's number is always behind it. Columns that hold it (named before the word,
not renamed): ``tasks.epoch``, ``attempts.number``, ``interruption_cases.interrupted_epoch``,
and ``operations.epoch`` / ``task_events.epoch`` for the epoch a row was written under.

A :class:`~surehand.model.Fence` is ``(attempt_id, task_id, epoch)``. It holds while

* the attempt's row is ``running`` and its ``number`` is ``epoch`` (:func:`attempt_is_current`),
* ``epoch`` is the TASK's current ``tasks.epoch`` (:func:`current_epoch`), and, for a write
  that moves the TASK, the TASK is still ``active``, unheld, in the same rework round
  (:func:`task_is_owned`).

A claim opens a new fence by a compare-and-set of ``tasks.epoch`` from ``e`` to
:func:`next_epoch` (``e + 1``), on every claim path: the one-statement claim of an inbox TASK
(``task_moves.CLAIM_INBOX``), the long way and a successor or rework attempt
(``dispatcher/claims.py``); the reconciler closes one by moving the
attempt ``running -> session_lost``. Every session write is checked by these clauses and by
nothing else. Where they are enforced:

1. :func:`surehand.store.attempts.fence` -- every fenced transaction of a session
   (``Session.fenced``: ``ctx.operation``, ``surehand effect``, the session MCP tools, progress,
   REPORTs, rollback): an UPDATE of the attempt's own row, so on Postgres it serialises with the
   reconciler's update of the same row.
2. :func:`surehand.store.attempts.fence_and_record_return` -- the agent's return value (the
   first write of ``Session.settle``).
3. :func:`surehand.store.session_writes.settle_first_report` -- the one-statement settle
   (``dispatcher/settling.py``): the attempt clause with the TASK row locked and owned.
4. ``lifecycle.apply(Move(fence=...))`` -- a move a session makes (submit, finish, rollback,
   wait) compare-and-sets ``tasks.epoch`` against the fence's epoch (:func:`task_expectation`);
   a claim's move opens the fence (:func:`opening`).

A write refused here raises ``StaleOwner`` in the session and leaves a
``stale_owner_fenced`` event; it is never applied.
"""

from __future__ import annotations

from typing import Any, overload

from sqlalchemy import ColumnElement, ScalarSelect, select

from surehand.model import AttemptState, Bucket, Fence
from surehand.store.schema import attempts, tasks


@overload
def next_epoch(epoch: int) -> int: ...
@overload
def next_epoch(epoch: ColumnElement[Any]) -> ColumnElement[Any]: ...
def next_epoch(epoch: int | ColumnElement[Any]) -> int | ColumnElement[Any]:
    """The epoch a claim opens on a TASK at ``epoch`` (a number read, or the column
    ``tasks.epoch`` in a claim's UPDATE): the only place a fence is opened."""
    return epoch + 1


def current_epoch(task_id: ColumnElement[Any]) -> ScalarSelect[Any]:
    """The TASK's epoch as a scalar subquery."""
    return select(tasks.c.epoch).where(tasks.c.task_id == task_id).scalar_subquery()


def attempt_is_current(
    attempt_id: ColumnElement[Any], epoch: ColumnElement[Any] | ScalarSelect[Any]
) -> tuple[ColumnElement[bool], ...]:
    """The attempt's row is running and its number is ``epoch``."""
    return (
        attempts.c.attempt_id == attempt_id,
        attempts.c.state == AttemptState.RUNNING.value,
        attempts.c.number == epoch,
    )


def task_is_owned(
    task_id: ColumnElement[Any], epoch: ColumnElement[Any], rework_round: ColumnElement[Any]
) -> tuple[ColumnElement[bool], ...]:
    """The TASK is active, unheld, at ``epoch`` and in ``rework_round``: only its current
    attempt may move it."""
    return (
        tasks.c.task_id == task_id,
        tasks.c.bucket == Bucket.ACTIVE.value,
        tasks.c.epoch == epoch,
        tasks.c.rework_round == rework_round,
        tasks.c.hold_case_id.is_(None),
    )


def opening(fence: Fence, read_epoch: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a claim's compare-and-set of the TASK row read at ``read_epoch`` expects (that
    epoch, no hold) and writes (the fence's epoch, :func:`next_epoch` of it)."""
    assert fence.epoch == next_epoch(read_epoch)
    return {"epoch": read_epoch, "hold_case_id": None}, {"epoch": fence.epoch}


def task_expectation(fence: Fence) -> dict[str, Any]:
    """What a move's compare-and-set of the TASK row expects beyond bucket and revision."""
    return {"epoch": fence.epoch}
