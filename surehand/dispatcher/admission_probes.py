"""Admission's evidence from probes: each open intent's probe asked whether its effect
happened (within a bound for all of them), its definite answers recorded on the operation."""

from __future__ import annotations

import logging
from collections.abc import Callable

from surehand.agents.probes import ProbeResult
from surehand.dispatcher.context import Services
from surehand.dispatcher.effects import as_result, is_open, observation
from surehand.model import Attempt, Operation
from surehand.store import operations

log = logging.getLogger(__name__)

# A probe by its name; None when this process has none of that name.
ProbeLookup = Callable[[str], Callable[[Operation], "bool | ProbeResult | None"] | None]


def run_probes(
    services: Services, probe: ProbeLookup, attempt: Attempt
) -> tuple[frozenset[str], list[dict[str, object]]]:
    """Ask each open intent's probe whether its effect happened; record definite answers
    (with what the probe saw) on the operation.

    Returns the probes that open intents name but this process does not have (those were
    never asked, which is not the same as an inconclusive answer), and each answer given.
    """
    with services.store.snapshot() as connection:
        pending = [
            op
            for op in operations.for_attempt(connection, attempt.attempt_id)
            if is_open(op) and op.probe
        ]
    unregistered = {op.probe for op in pending if op.probe and probe(op.probe) is None}
    asked: list[dict[str, object]] = []
    started = services.clock.now()
    for op in pending:
        if op.probe in unregistered:
            _log_unregistered(op)
            continue
        result = _ask_within(services, probe, op, (services.clock.now() - started).total_seconds())
        asked.append(observation(op, result))
        if result.present is None:
            continue
        with services.store.transaction() as connection:
            operations.confirm(
                connection,
                op.operation_id,
                present=result.present,
                source=_probe_source(op, result),
                now=services.clock.now(),
            )
    return frozenset(name for name in unregistered if name), asked


def _ask_within(services: Services, probe: ProbeLookup, op: Operation, spent: float) -> ProbeResult:
    """The probe's answer, unless this admission's probes already took their bound (an
    agent declaring many slow probes must not hold a reconciler pass): then unknown."""
    bound = services.settings.probe_total_seconds
    if spent < bound:
        return _ask(probe, op)
    why = (
        f"not asked: this admission's probes took {spent:.0f} s of their "
        f"SUREHAND_PROBE_TOTAL_SECONDS={bound:g}"
    )
    return ProbeResult(None, {"why": why})


def _ask(probe: ProbeLookup, op: Operation) -> ProbeResult:
    found = probe(op.probe or "")
    assert found is not None  # unregistered probes are not asked (:func:`run_probes`)
    try:
        return as_result(found(op))
    except Exception as error:
        log.exception("probe %r raised; treating the effect as unknown", op.probe)
        return ProbeResult(None, {"why": f"the probe raised {type(error).__name__}"})


def _log_unregistered(op: Operation) -> None:
    log.warning(
        "probe %r is not registered in this process; operation %s was not asked. Register it "
        "in the workers (SUREHAND_PROBES=%s=module:function, or @sh.probe in the agents module)",
        op.probe,
        op.operation_id,
        op.probe,
    )


def _probe_source(op: Operation, result: ProbeResult) -> dict[str, object]:
    """Who established an effect (``probe:NAME``) and what it saw, kept on the operation."""
    source: dict[str, object] = {"source": f"probe:{op.probe}"}
    return {**source, "saw": dict(result.saw)} if result.saw else source
