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

The intent and the outcome are each repeated while the store cannot confirm them
(``Session.retrying``). A repeated intent whose earlier try committed finds its own open intent
(this attempt's, same fingerprint) and adopts it instead of writing a second one; a repeated
outcome is a compare-and-set on the open intent, so after a commit that landed it writes
nothing. When the retries run out the session is interrupted (``SessionInterrupted``) and the
open intent tells admission that the effect may have run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from surehand.agents.context import EffectResult
from surehand.crashpoints import CrashPoint, crash_point
from surehand.digest import operation_fingerprint
from surehand.dispatcher.effects import keyed
from surehand.dispatcher.reports import jsonable
from surehand.dispatcher.sessions import Session
from surehand.errors import OperationFailed
from surehand.model import Declaration, Operation, OperationState, RetryPolicy
from surehand.operation_requests import parse_operation, parse_outcome
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
    probe_args: Mapping[str, Any] | None = None,
) -> Any:
    """Declare, run and settle one operation for ``session``; returns the effect's value."""
    declared = Declared.of(name, args, idempotency_key, retry_policy, probe, probe_args)
    recorded = session.retrying(
        f"operation_intent:{name}", lambda repeat: _declare(session, declared, repeat)
    )
    if isinstance(recorded, _Recorded):
        return recorded.value
    crash_point(CrashPoint.OPERATION_AFTER_INTENT)
    return _perform(session, recorded, effect)


def declare_operation(
    session: Session, declared: Declared, *, within: Sequence[int] = ()
) -> int | None:
    """Commit the intent of an operation whose effect the agent runs itself (the session MCP
    tool ``effect_begin``): the operation id to settle with :func:`settle_operation`, or None
    when this TASK already recorded it as succeeded (do not run it again). The same fenced,
    repeated write as :func:`run_operation`'s intent; ``OperationFailed`` for an unsafe repeat.

    Idempotent within the attempt: declared again while its intent is open (the same name and
    args, so the same fingerprint), it answers the same operation id and writes nothing -- an
    agent whose reply was lost, or that asks twice, does not hold its own TASK. The repeat must
    declare it the same way (idempotency key, retry policy, probe): under another key the far
    side could not dedupe two tries, so that is refused, naming the recorded declaration. The
    same name with other args is another effect (another fingerprint): it gets an intent of its
    own, and two open intents after an interruption are held for review (DESIGN.md section 6).
    (:func:`run_operation` does not adopt: there surehand runs the effect, and a second caller
    of an open intent would run it twice.) ``within``: the open declared effects a call the
    hooks journal runs within, recorded with a new intent (not part of its fingerprint)."""
    recorded = session.retrying(
        f"operation_intent:{declared.name}",
        lambda repeat: _declare(session, declared, repeat, adopt=True, within=within),
    )
    return None if isinstance(recorded, _Recorded) else recorded


class ReportedFailure(Exception):
    """The agent's own account that an effect it ran failed (recorded as the outcome's error)."""


def settle_operation(
    session: Session,
    operation_id: int,
    *,
    value: Any,
    receipt: str | None,
    error: str | None,
) -> None:
    """Record the outcome of an intent from :func:`declare_operation`: succeeded with ``value``
    and ``receipt``, or failed with ``error`` (fenced and repeated like :func:`run_operation`'s
    outcome; a compare-and-set on the open intent)."""
    reported = parse_outcome(value=value, receipt=receipt, error=error)
    failure = ReportedFailure(reported.error) if reported.error is not None else None
    _settle(session, operation_id, EffectResult(reported.value, reported.receipt), failure)


@dataclass(frozen=True)
class Declared(Declaration):
    """An operation as the agent declared it (made with :meth:`of`, which validates it)."""

    @classmethod
    def of(
        cls,
        name: str,
        args: Mapping[str, Any],
        idempotency_key: str | None,
        retry_policy: RetryPolicy | str,
        probe: str | None,
        probe_args: Mapping[str, Any] | None = None,
    ) -> Declared:
        """The declaration, validated like every door's input (ValidationFailed naming the
        first bad argument; nothing is written)."""
        request = parse_operation(
            name=name,
            args=args,
            idempotency_key=idempotency_key,
            retry_policy=retry_policy,
            probe=probe,
            probe_args=probe_args,
        )
        return cls(
            request.name,
            request.args,
            request.idempotency_key,
            request.retry_policy,
            request.probe,
            request.probe_args,
        )


@dataclass(frozen=True)
class _Recorded:
    """A success already recorded for this operation: its value, returned without running."""

    value: Any


def _declare(
    session: Session,
    declared: Declared,
    repeat: bool,
    *,
    adopt: bool = False,
    within: Sequence[int] = (),
) -> int | _Recorded:
    """Commit the intent (fenced); the operation id to settle, or a recorded success.
    ``adopt``: this attempt's own open intent of the same declaration is the answer."""
    fingerprint = operation_fingerprint(declared.name, declared.args)
    with session.fenced(f"operation_intent:{declared.name}") as connection:
        prior = operations.latest_by_fingerprint(connection, session.task_id, fingerprint)
        if prior is not None and prior.state is OperationState.SUCCEEDED:
            return _Recorded((prior.outcome or {}).get("value"))
        if (repeat or adopt) and _own_open(session, prior):
            assert prior is not None
            _require_same(prior, declared)
            return prior.operation_id  # begun before in this attempt (or only a reply lost)
        _refuse_unsafe_repeat(session, prior, declared.retry_policy, declared.idempotency_key)
        if _bound_here(session, prior):
            assert prior is not None
            return prior.operation_id
        return operations.insert_intent(
            connection,
            declared,
            session.attempt,
            fingerprint=fingerprint,
            now=session.services.clock.now(),
            declared_within=within,
        )


def _own_open(session: Session, prior: Operation | None) -> bool:
    """An open intent this very attempt wrote: on a repeat, the earlier try's own intent.
    (Not the operation admission bound to this attempt: that one keeps its key check.)"""
    return (
        prior is not None
        and prior.state is OperationState.INTENT
        and prior.attempt_id == session.attempt.attempt_id
        and prior.operation_id != session.attempt.bound_operation_id
    )


def _require_same(prior: Operation, declared: Declared) -> None:
    """An open intent is answered again only for the declaration it recorded."""
    recorded = (prior.idempotency_key, prior.retry_policy, prior.probe, prior.probe_args or None)
    asked = (declared.idempotency_key, declared.retry_policy, declared.probe, declared.probe_args)
    if asked != recorded:
        raise OperationFailed(
            f"operation {prior.name!r} with these args is already begun in this attempt "
            f"(operation {prior.operation_id}, idempotency key {prior.idempotency_key!r}, "
            f"retry policy {prior.retry_policy.value!r}, probe {prior.probe!r}); declare it "
            "the same way to get its id again, or end it with its outcome first"
        )


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
    crash_point(CrashPoint.OPERATION_AFTER_EFFECT)
    _settle(session, operation_id, produced, None)
    crash_point(CrashPoint.OPERATION_AFTER_OUTCOME)
    return produced.value if isinstance(produced, EffectResult) else produced


def _settle(
    session: Session, operation_id: int, produced: Any, error: BaseException | None
) -> None:
    receipt = produced.external_receipt if isinstance(produced, EffectResult) else None
    value = produced.value if isinstance(produced, EffectResult) else produced

    def write(_repeat: bool) -> None:
        # A compare-and-set on the open intent: a repeat after a commit that landed is a no-op.
        with session.fenced("operation_outcome") as connection:
            operations.settle(
                connection,
                operation_id,
                state=OperationState.FAILED if error else OperationState.SUCCEEDED,
                outcome=None if error else {"value": jsonable(value)},
                external_receipt=receipt,
                error=f"{type(error).__name__}: {error}" if error else None,
                now=session.services.clock.now(),
            )

    session.retrying("operation_outcome", write)
