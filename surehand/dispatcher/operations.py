"""Running a declared operation: intent (fenced, committed) -> effect -> outcome (fenced).

What the TASK already recorded for the same fingerprint decides whether the effect may run:

- succeeded: never run again, return the recorded value;
- an open intent bound to this attempt (a successor admitted as ``single_verified``): run it
  once more with the recorded idempotency key;
- failed because a probe found the effect absent: run again;
- failed because the effect raised (it may have happened): run again only if it was declared
  under the ``keyed`` retry policy with an idempotency key and is repeated with that same key
  (so the far side can dedupe the two tries), else refuse;
- nothing recorded: run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from surehand.agents.context import EffectResult
from surehand.crashpoints import crash_point
from surehand.digest import operation_fingerprint
from surehand.dispatcher.effects import keyed
from surehand.dispatcher.sessions import Session, _jsonable
from surehand.errors import OperationFailed
from surehand.model import Operation, OperationState, RetryPolicy
from surehand.store import operations

PROBE_ABSENT = "absent"


def run_operation(
    session: Session,
    name: str,
    args: Mapping[str, Any],
    effect: Callable[[], Any],
    *,
    idempotency_key: str | None,
    retry_policy: RetryPolicy,
    probe: str | None,
) -> Any:
    """Declare, run and settle one operation for ``session``; returns the effect's value."""
    fingerprint = operation_fingerprint(name, args)
    with session.fenced(f"operation_intent:{name}") as connection:
        prior = operations.latest_by_fingerprint(connection, session.task_id, fingerprint)
        if prior is not None and prior.state is OperationState.SUCCEEDED:
            return (prior.outcome or {}).get("value")
        _refuse_unsafe_repeat(session, prior, retry_policy, idempotency_key)
        if _bound_here(session, prior):
            assert prior is not None
            operation_id = prior.operation_id
        else:
            operation_id = operations.insert_intent(
                connection,
                task_id=session.task_id,
                attempt_id=session.attempt.attempt_id,
                epoch=session.attempt.number,
                name=name,
                fingerprint=fingerprint,
                args=args,
                idempotency_key=idempotency_key,
                retry_policy=retry_policy,
                probe=probe,
                now=session.services.clock.now(),
            )
    crash_point("operation.after_intent")
    return _perform(session, operation_id, effect)


def _bound_here(session: Session, prior: Operation | None) -> bool:
    return (
        prior is not None
        and prior.state is OperationState.INTENT
        and prior.operation_id == session.attempt.bound_operation_id
    )


def _refuse_unsafe_repeat(
    session: Session,
    prior: Operation | None,
    retry_policy: RetryPolicy,
    idempotency_key: str | None,
) -> None:
    if prior is None:
        return
    if _bound_here(session, prior):
        # Admission bound this attempt to repeat the effect with its recorded key; under any
        # other key the far side could not recognise the repeat.
        if idempotency_key != prior.idempotency_key:
            raise OperationFailed(
                f"operation {prior.name!r} was admitted to run again with idempotency key "
                f"{prior.idempotency_key!r}, not {idempotency_key!r}"
            )
        return
    if prior.state is OperationState.INTENT:
        raise OperationFailed(
            f"operation {prior.name!r} has an open intent from attempt {prior.epoch} that no "
            "admission bound to this attempt; it is not repeated blindly"
        )
    if (prior.outcome or {}).get("probe") == PROBE_ABSENT:
        return
    # A repeat is safe only if the far side can dedupe it against the failed try: that try
    # must have carried a key under the keyed policy, and the repeat must carry the same key.
    if (
        keyed(prior)
        and retry_policy is RetryPolicy.KEYED
        and idempotency_key == prior.idempotency_key
    ):
        return
    raise OperationFailed(
        f"operation {prior.name!r} failed before ({prior.error}); it may have taken effect, so "
        "it is not repeated unless it was declared with retry_policy='keyed' and an idempotency "
        "key, and is repeated with that same key"
    )


def _perform(session: Session, operation_id: int, effect: Callable[[], Any]) -> Any:
    try:
        produced = effect()
    except Exception as error:
        _settle(session, operation_id, None, error)
        raise OperationFailed(f"operation effect raised {type(error).__name__}: {error}") from error
    crash_point("operation.after_effect")
    _settle(session, operation_id, produced, None)
    crash_point("operation.after_outcome")
    return produced.value if isinstance(produced, EffectResult) else produced


def _settle(
    session: Session, operation_id: int, produced: Any, error: BaseException | None
) -> None:
    receipt = produced.external_receipt if isinstance(produced, EffectResult) else None
    value = produced.value if isinstance(produced, EffectResult) else produced
    with session.fenced("operation_outcome") as connection:
        operations.settle(
            connection,
            operation_id,
            state=OperationState.FAILED if error else OperationState.SUCCEEDED,
            outcome=None if error else {"value": _jsonable(value)},
            external_receipt=receipt,
            error=f"{type(error).__name__}: {error}" if error else None,
            now=session.services.clock.now(),
        )
