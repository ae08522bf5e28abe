"""The answer to a ``write_task`` call whose submission has a receipt already.

Every receipt is written ``committed``, with the full result, in the transaction that creates
its TASK (:mod:`surehand.dispatcher.submissions`), so deciding on one reads nothing more and
writes nothing. Checks run in the order of DESIGN.md section 3: a schema mismatch, then a
digest mismatch (each a typed ``conflict`` that changes nothing), then the replay: the first
result, answered ``reused`` under the identity it was created with.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from surehand.dispatcher.task_creation import SubmissionCall, write_result
from surehand.model import (
    DIGEST_SCHEMA_VERSION,
    ConflictCode,
    ConflictInfo,
    Disposition,
    Receipt,
    WriteTaskResult,
)

log = logging.getLogger(__name__)


def answer(call: SubmissionCall, receipt: Receipt) -> WriteTaskResult:
    """``call``'s answer from its submission's committed ``receipt``."""
    mismatch = _mismatch(call, receipt)
    return mismatch if mismatch is not None else _replay(call, receipt)


def _mismatch(call: SubmissionCall, receipt: Receipt) -> WriteTaskResult | None:
    submission_id = call.submission_id
    if receipt.digest_schema_version != DIGEST_SCHEMA_VERSION:
        return _conflict(
            call,
            receipt,
            ConflictCode.SCHEMA_MISMATCH,
            f"submission {submission_id!r} was first made with digest schema "
            f"{receipt.digest_schema_version}; use a new client_submission_id",
        )
    if receipt.request_digest != call.digest:
        return _conflict(
            call,
            receipt,
            ConflictCode.DIGEST_MISMATCH,
            f"submission {submission_id!r} was first made with a different request; "
            "resend the original request, or use a new client_submission_id",
        )
    return None


def _replay(call: SubmissionCall, receipt: Receipt) -> WriteTaskResult:
    """The first result as it was stored (its path is where the TASK was created), reused."""
    first = receipt.result
    return write_result(
        first["task_id"],
        first["task_path"],
        Disposition.REUSED,
        call.submission_id,
        first["request_digest"],
        receipt.state,
        first["digest_schema_version"],
    )


def _conflict(
    call: SubmissionCall, receipt: Receipt, code: ConflictCode, message: str
) -> WriteTaskResult:
    log.info("write_task conflict %s for submission %s", code.value, call.submission_id)
    result = call.result(receipt.task_id, receipt.task_path, Disposition.CONFLICT, receipt.state)
    return replace(result, conflict=ConflictInfo(code, message))
