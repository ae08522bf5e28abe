"""Recovery of a ``write_task`` receipt that another call wrote first.

A receipt found short of ``committed`` (left by a writer whose TASK store did not share its
transaction, or restored from elsewhere) is recovered under its original identity following
the table in DESIGN.md section 3; a live holder is waited for (bounded), an expired one is
taken over with a compare-and-set. Checks run in this order: schema/digest mismatch, in
progress, replay.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

from surehand.crashpoints import CrashPoint, crash_point
from surehand.digest import sha256_hex
from surehand.dispatcher.dispatch import after_create, publish_after_commit
from surehand.dispatcher.task_creation import SubmissionCall, insert_task, render, write_result
from surehand.errors import DuplicateKey
from surehand.model import (
    DIGEST_SCHEMA_VERSION,
    ConflictCode,
    ConflictInfo,
    Disposition,
    Receipt,
    ReceiptState,
    Task,
    WriteTaskResult,
)
from surehand.store import receipts, tasks

log = logging.getLogger(__name__)


class _HoldLost(Exception):
    """Our hold on the receipt was taken over while we worked; start the call again."""


class ReceiptRecovery:
    """Converge one call on an existing receipt: replay it, wait for its holder, or take over."""

    def __init__(self, call: SubmissionCall) -> None:
        self.call = call
        self.holder = uuid.uuid4().hex
        self.deadline = time.monotonic() + call.services.settings.submission_wait_seconds
        self.pause = 0.005

    def _hold(self) -> timedelta:
        return timedelta(seconds=self.call.services.settings.submission_hold_seconds)

    # -- stages 2 and 3 -----------------------------------------------------------------------

    def _create(self, receipt: Receipt) -> WriteTaskResult | None:
        """Insert the TASK under the receipt's identity and commit the receipt; None means
        "read the receipt again" (our hold was lost, or the TASK row was found meanwhile and
        there is nothing to decide on yet)."""
        call = self.call
        try:
            with call.services.store.transaction() as connection:
                now = call.services.clock.now()
                document_digest = insert_task(
                    connection,
                    task_id=receipt.task_id,
                    tenant=call.tenant,
                    fields=call.fields,
                    submission_id=call.submission_id,
                    digest=call.digest,
                    document=render(receipt.task_id, call.fields, call.submission_id, now),
                    now=now,
                )
                result = self._finish(connection, receipt, document_digest, created=True)
        except DuplicateKey:
            # The TASK row exists already (an earlier holder got that far): still holding the
            # receipt, decide on what is there instead of creating.
            return self._resume(receipt)
        except _HoldLost:
            return None
        crash_point(CrashPoint.WRITE_TASK_AFTER_COMMIT)
        after_create(call.services, receipt.task_id)
        return result

    def _finish(
        self, connection: Any, receipt: Receipt, document_digest: str, *, created: bool
    ) -> WriteTaskResult:
        """reserved -> task_created (if needed) -> committed, all inside ``connection``."""
        now = self.call.services.clock.now()
        if receipt.state is ReceiptState.RESERVED:
            if not receipts.mark_task_created(
                connection, receipt, holder=self.holder, document_digest=document_digest, now=now
            ):
                raise _HoldLost
            crash_point(CrashPoint.WRITE_TASK_BEFORE_COMMIT)
        if not created:
            # Adopting a TASK found in the store: confirm its document inside this
            # transaction. (A TASK this transaction inserted was hashed from the very text
            # it stored; reading back up to 1 MiB would confirm nothing more.)
            stored = tasks.document(connection, receipt.task_id)
            if stored is None or sha256_hex(stored) != document_digest:
                raise _HoldLost  # the row changed under us; re-read and decide again
        result = self._result(receipt, Disposition.CREATED, ReceiptState.COMMITTED)
        moved = receipts.mark_committed(
            connection,
            _with_state(receipt, ReceiptState.TASK_CREATED),
            holder=self.holder,
            result=result.to_dict(),
            now=now,
        )
        if not moved:
            raise _HoldLost
        if created:
            return result
        return self._result(receipt, Disposition.REUSED, ReceiptState.COMMITTED)

    # -- an existing receipt ------------------------------------------------------------------

    def converge(self, receipt: Receipt) -> WriteTaskResult | None:
        """Decide on an existing receipt; None means "read it again" (it changed under us)."""
        mismatch = self._mismatch(receipt)
        if mismatch is not None:
            return mismatch
        if receipt.state is ReceiptState.COMMITTED:
            return self._replay(receipt)
        if receipt.held_until is not None and receipt.held_until > self.call.services.clock.now():
            return self._wait_or_give_up(receipt)
        return self._recover(receipt)

    def _mismatch(self, receipt: Receipt) -> WriteTaskResult | None:
        submission_id = self.call.submission_id
        if receipt.digest_schema_version != DIGEST_SCHEMA_VERSION:
            return self._conflict(
                receipt,
                ConflictCode.SCHEMA_MISMATCH,
                f"submission {submission_id!r} was first made with digest schema "
                f"{receipt.digest_schema_version}; use a new client_submission_id",
            )
        if receipt.request_digest != self.call.digest:
            return self._conflict(
                receipt,
                ConflictCode.DIGEST_MISMATCH,
                f"submission {submission_id!r} was first made with a different request; "
                "resend the original request, or use a new client_submission_id",
            )
        return None

    def _replay(self, receipt: Receipt) -> WriteTaskResult:
        assert receipt.result is not None
        first = receipt.result
        return write_result(
            first["task_id"],
            first["task_path"],
            Disposition.REUSED,
            self.call.submission_id,
            first["request_digest"],
            ReceiptState.COMMITTED,
            first["digest_schema_version"],
        )

    def _wait_or_give_up(self, receipt: Receipt) -> WriteTaskResult | None:
        if time.monotonic() >= self.deadline:
            return self._conflict(
                receipt,
                ConflictCode.IN_PROGRESS,
                f"submission {self.call.submission_id!r} is being created by another call; "
                "retry with the same client_submission_id shortly",
            )
        time.sleep(self.pause * (1 + random.random()))
        self.pause = min(self.pause * 2, 0.1)
        return None

    def _recover(self, receipt: Receipt) -> WriteTaskResult | None:
        """Take over a receipt whose holder is gone and resume it under its identity.

        A recovery fact that forbids going on (task missing, another identity at the target)
        is answered before taking the receipt over, so that such a conflict writes nothing:
        the receipt keeps its holder and its age, and diagnostics keep calling it stalled.
        """
        refusal = self._refusal(receipt, *self._target(receipt))
        if refusal is not None:
            return self._conflict(receipt, *refusal)
        now = self.call.services.clock.now()
        with self.call.services.store.transaction() as connection:
            if not receipts.take_over(
                connection, receipt, holder=self.holder, held_until=now + self._hold(), now=now
            ):
                return None
        return self._resume(receipt)

    def _resume(self, receipt: Receipt) -> WriteTaskResult | None:
        """Holding the receipt, apply the recovery rule for its stage and the TASK's state."""
        task, document = self._target(receipt)
        refusal = self._refusal(receipt, task, document)
        if refusal is not None:
            return self._refuse(receipt, *refusal)
        if task is None:
            return self._create(receipt)  # reserved, task absent: continue with its identity
        return self._adopt(receipt, task.document_digest)

    def _target(self, receipt: Receipt) -> tuple[Task | None, str | None]:
        """The TASK at the receipt's preallocated id, and its stored document."""
        with self.call.services.store.snapshot() as connection:
            task = tasks.get(connection, receipt.task_id)
            document = tasks.document(connection, receipt.task_id) if task else None
        return task, document

    def _refusal(
        self, receipt: Receipt, task: Task | None, document: str | None
    ) -> tuple[ConflictCode, str] | None:
        """The recovery rule of DESIGN.md section 3 that forbids going on, if any."""
        if task is None:
            if receipt.state is ReceiptState.RESERVED:
                return None  # task absent: continue with the same identity
            return ConflictCode.TASK_MISSING, _missing(receipt)
        if not self._matches(task.tenant, task.client_submission_id, task.request_digest):
            return ConflictCode.TARGET_MISMATCH, _foreign(receipt)
        if document is None or sha256_hex(document) != task.document_digest:
            return ConflictCode.TARGET_MISMATCH, _foreign(receipt)  # content changed
        if receipt.state is ReceiptState.TASK_CREATED and (
            receipt.document_digest != task.document_digest
        ):
            return ConflictCode.TARGET_MISMATCH, _foreign(receipt)
        return None

    def _matches(self, tenant: str, submission_id: str | None, digest: str) -> bool:
        call = self.call
        return (tenant, submission_id, digest) == (call.tenant, call.submission_id, call.digest)

    def _adopt(self, receipt: Receipt, document_digest: str) -> WriteTaskResult | None:
        """The TASK exists and matches: finish committing the receipt, create nothing."""
        try:
            with self.call.services.store.transaction() as connection:
                result = self._finish(connection, receipt, document_digest, created=False)
        except _HoldLost:
            return None
        publish_after_commit(self.call.services, receipt.task_id)
        return result

    def _refuse(self, receipt: Receipt, code: ConflictCode, message: str) -> WriteTaskResult:
        """A recovery fact contradicts the receipt: report it, change nothing but our hold."""
        services = self.call.services
        with services.store.transaction() as connection:
            receipts.release_hold(connection, receipt, holder=self.holder, now=services.clock.now())
        return self._conflict(receipt, code, message)

    # -- results ------------------------------------------------------------------------------

    def _result(
        self, receipt: Receipt, disposition: Disposition, state: ReceiptState
    ) -> WriteTaskResult:
        return self.call.result(receipt.task_id, receipt.task_path, disposition, state)

    def _conflict(self, receipt: Receipt, code: ConflictCode, message: str) -> WriteTaskResult:
        log.info("write_task conflict %s for submission %s", code.value, self.call.submission_id)
        result = self._result(receipt, Disposition.CONFLICT, receipt.state)
        return replace(result, conflict=ConflictInfo(code, message))


def _with_state(receipt: Receipt, state: ReceiptState) -> Receipt:
    return replace(receipt, state=state)


def _missing(receipt: Receipt) -> str:
    return (
        f"receipt {receipt.client_submission_id!r} says {receipt.task_id} was created, but it is "
        "missing; surehand will not recreate it silently. Inspect with `surehand diagnose`"
    )


def _foreign(receipt: Receipt) -> str:
    return (
        f"{receipt.task_id}, reserved for submission {receipt.client_submission_id!r}, holds "
        "another identity or content; nothing was overwritten. Inspect with `surehand diagnose`"
    )
