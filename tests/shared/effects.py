"""What other test modules need from ``tests/unit/test_effects.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from surehand.model import (
    Operation,
    OperationState,
    RetryPolicy,
)

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def op(kind: str, operation_id: int = 1) -> Operation:
    """An operation of one of the :data:`KINDS` (what an interrupted attempt may leave)."""
    base = Operation(
        operation_id=operation_id,
        task_id="TASK-20261130-001",
        attempt_id="a1",
        epoch=1,
        name=f"op{operation_id}",
        fingerprint=f"{operation_id:024x}",
        args={"n": operation_id},
        idempotency_key=None,
        retry_policy=RetryPolicy.NONE,
        probe=None,
        state=OperationState.INTENT,
        outcome=None,
        external_receipt=None,
        error=None,
        started_at=T0,
        settled_at=None,
    )
    keyed = {"idempotency_key": f"key-{operation_id}", "retry_policy": RetryPolicy.KEYED}
    settled: dict[str, Any] = {"settled_at": T0}
    changes: dict[str, dict[str, Any]] = {
        "open": {},
        "open_keyed": keyed,
        "open_key_policy_none": {"idempotency_key": f"key-{operation_id}"},
        "open_policy_keyed_no_key": {"retry_policy": RetryPolicy.KEYED},
        "open_probe": {"probe": "gateway"},  # not answered, or inconclusive
        "succeeded": {**settled, "state": OperationState.SUCCEEDED, "outcome": {"value": 1}},
        "raised": {**settled, "state": OperationState.FAILED, "error": "RuntimeError: boom"},
        "raised_keyed": {**settled, **keyed, "state": OperationState.FAILED, "error": "E: x"},
        "probed_absent": {
            **settled,
            "state": OperationState.FAILED,
            "outcome": {"probe": "absent", "source": "probe:gateway"},
        },
        "probed_present": {
            **settled,
            "state": OperationState.SUCCEEDED,
            "outcome": {"probe": "present", "source": "probe:gateway"},
        },
    }
    return replace(base, **changes[kind])
