"""``write_task``: create a TASK exactly once per (tenant, client_submission_id).

The fast path is one transaction in which the TASK store joins the receipt's transaction
(DESIGN.md section 3): allocate the task number, insert the receipt — it passes ``reserved``
and ``task_created`` inside the transaction and is written ``committed`` with the full result
and the document digest — insert the TASK and its creation event, commit. A crash anywhere
before the commit leaves nothing behind; after it, every retry replays the result. Concurrent
callers with one id converge on the unique (tenant, id) key: the database makes the others wait
for the first commit, then they read the committed receipt and answer ``reused``.

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
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from surehand.clock import utc_day
from surehand.crashpoints import crash_point
from surehand.digest import request_digest, sha256_hex
from surehand.dispatcher.context import Services
from surehand.dispatcher.dispatch import publish_after_commit
from surehand.errors import DuplicateKey, StoreError
from surehand.fcop import render_task
from surehand.model import (
    DIGEST_SCHEMA_VERSION,
    Action,
    Bucket,
    ConflictCode,
    ConflictInfo,
    Disposition,
    EventKind,
    Receipt,
    ReceiptState,
    Task,
    TaskFields,
    WriteTaskResult,
    task_path,
)
from surehand.requests import TaskRequest, parse_task_request, validate_tenant
from surehand.store import counters, creation, events, receipts, tasks

log = logging.getLogger(__name__)

_MAX_COLLISIONS = 3


class _HoldLost(Exception):
    """Our hold on the receipt was taken over while we worked; start the call again."""


def write_task(
    services: Services, request: TaskRequest | Mapping[str, Any], *, tenant: str
) -> WriteTaskResult:
    """Create a TASK, or recover the result of the first call with the same submission id."""
    parsed = parse_task_request(request)
    tenant = validate_tenant(tenant)
    fields = parsed.to_fields()
    digest = request_digest(fields)
    if parsed.client_submission_id is None:
        return _create_legacy(services, fields, digest, tenant)
    return _Submission(services, tenant, parsed.client_submission_id, fields, digest).run()


def _new_task_id(connection: Any, services: Services, ahead: int | None = None) -> str:
    day = utc_day(services.clock.now())
    number = ahead if ahead is not None else counters.next_number(connection, "TASK", day)
    return f"TASK-{day}-{number:03d}"


def _render(
    task_id: str, fields: TaskFields, submission_id: str | None, now: datetime
) -> tuple[str, str]:
    """The TASK's FCoP document and its SHA-256 (the receipt's document digest)."""
    document = render_task(task_id, fields, created_at=now, submission_id=submission_id)
    return document, sha256_hex(document)


def _insert_task(
    connection: Any,
    *,
    task_id: str,
    tenant: str,
    fields: TaskFields,
    submission_id: str | None,
    digest: str,
    document: tuple[str, str],
    now: datetime,
) -> str:
    """Insert the TASK row and its creation event; returns the document digest."""
    text, document_digest = document
    tasks.insert_task(
        connection,
        task_id=task_id,
        tenant=tenant,
        fields=fields,
        submission_id=submission_id,
        request_digest=digest,
        document=text,
        document_digest=document_digest,
        now=now,
    )
    events.append(
        connection,
        task_id=task_id,
        kind=EventKind.TRANSITION,
        by=fields.sender,
        at=now,
        action=Action.CREATE.value,
        to_bucket=Bucket.INBOX,
    )
    return document_digest


def _creation_event(task_id: str, fields: TaskFields, now: datetime) -> dict[str, Any]:
    """The history's first event: created into ``inbox`` by the sender."""
    return events.row(
        task_id=task_id,
        kind=EventKind.TRANSITION,
        by=fields.sender,
        at=now,
        action=Action.CREATE.value,
        to_bucket=Bucket.INBOX,
    )


def _create_legacy(
    services: Services, fields: TaskFields, digest: str, tenant: str
) -> WriteTaskResult:
    """No submission id: create a TASK with no retry guarantee (``idempotent: false``)."""
    now = services.clock.now()
    with services.store.transaction() as connection:
        task_id = _new_task_id(connection, services)
        _insert_task(
            connection,
            task_id=task_id,
            tenant=tenant,
            fields=fields,
            submission_id=None,
            digest=digest,
            document=_render(task_id, fields, None, now),
            now=now,
        )
    publish_after_commit(services, task_id)
    return WriteTaskResult(
        disposition=Disposition.CREATED,
        action_taken=True,
        task_id=task_id,
        task_path=task_path(Bucket.INBOX, task_id, fields.sender, fields.recipient),
        client_submission_id=None,
        request_digest=digest,
        digest_schema_version=DIGEST_SCHEMA_VERSION,
        receipt_state=None,
        idempotent=False,
    )


class _Submission:
    """One write_task call with a submission id: reserve, or converge on the existing receipt."""

    def __init__(
        self, services: Services, tenant: str, submission_id: str, fields: TaskFields, digest: str
    ) -> None:
        self.services = services
        self.tenant = tenant
        self.submission_id = submission_id
        self.fields = fields
        self.digest = digest
        self.holder = uuid.uuid4().hex
        self.deadline = time.monotonic() + services.settings.submission_wait_seconds
        self.pause = 0.005

    def run(self) -> WriteTaskResult:
        collisions = 0
        while True:
            # A retry (the common case after a lost response) costs one read.
            receipt = self._read()
            if receipt is None:
                created = self._create_at_once()
                if created is not None:
                    return created
                receipt = self._read()  # another caller committed it first
            # Receipts are never deleted: follow this one until it answers.
            while receipt is not None:
                outcome = self._converge(receipt)
                if outcome is not None:
                    return outcome
                receipt = self._read()
            # The insert hit a unique key, yet this submission has no receipt: the number the
            # counter handed out belongs to another receipt. Never spin on it.
            collisions += 1
            if collisions >= _MAX_COLLISIONS:
                raise StoreError(
                    "the TASK counter handed out a number that another submission already "
                    "holds (was the database restored from an older backup?); nothing was "
                    "written. Move the counters row past the highest task number and retry"
                )

    def _create_at_once(self) -> WriteTaskResult | None:
        """Number, receipt, TASK and event in one transaction; None if the id was taken."""
        now = self.services.clock.now()
        ahead = self.services.store.allocate_ahead("TASK", utc_day(now))
        try:
            # One statement on Postgres, one transaction on SQLite: all or nothing either way.
            with self.services.store.one_write() as connection:
                task_id = _new_task_id(connection, self.services, ahead)
                path = task_path(Bucket.INBOX, task_id, self.fields.sender, self.fields.recipient)
                result = self._created(task_id, path)
                text, document_digest = _render(task_id, self.fields, self.submission_id, now)
                crash_point("write_task.before_commit")
                creation.insert_created(
                    connection,
                    receipt=receipts.committed_row(
                        tenant=self.tenant,
                        submission_id=self.submission_id,
                        schema_version=DIGEST_SCHEMA_VERSION,
                        digest=self.digest,
                        task_id=task_id,
                        task_path=path,
                        document_digest=document_digest,
                        result=result.to_dict(),
                        now=now,
                    ),
                    task=tasks.new_row(
                        task_id=task_id,
                        tenant=self.tenant,
                        fields=self.fields,
                        submission_id=self.submission_id,
                        request_digest=self.digest,
                        document=text,
                        document_digest=document_digest,
                        now=now,
                    ),
                    event=_creation_event(task_id, self.fields, now),
                )
        except DuplicateKey as error:
            if error.table not in ("receipts", "unknown"):
                raise
            return None
        crash_point("write_task.after_commit")
        publish_after_commit(self.services, task_id)
        return result

    def _created(self, task_id: str, path: str) -> WriteTaskResult:
        return WriteTaskResult(
            disposition=Disposition.CREATED,
            action_taken=True,
            task_id=task_id,
            task_path=path,
            client_submission_id=self.submission_id,
            request_digest=self.digest,
            digest_schema_version=DIGEST_SCHEMA_VERSION,
            receipt_state=ReceiptState.COMMITTED,
            idempotent=True,
        )

    def _hold(self) -> timedelta:
        return timedelta(seconds=self.services.settings.submission_hold_seconds)

    # -- stages 2 and 3 -----------------------------------------------------------------------

    def _create(self, receipt: Receipt) -> WriteTaskResult:
        """Insert the TASK under the receipt's identity and commit the receipt."""
        try:
            with self.services.store.transaction() as connection:
                now = self.services.clock.now()
                document_digest = _insert_task(
                    connection,
                    task_id=receipt.task_id,
                    tenant=self.tenant,
                    fields=self.fields,
                    submission_id=self.submission_id,
                    digest=self.digest,
                    document=_render(receipt.task_id, self.fields, self.submission_id, now),
                    now=now,
                )
                result = self._finish(connection, receipt, document_digest, created=True)
        except DuplicateKey:
            # The TASK row exists already (an earlier holder got that far): still holding the
            # receipt, decide on what is there instead of creating.
            return self._resume(receipt) or self.run()
        except _HoldLost:
            return self.run()
        crash_point("write_task.after_commit")
        publish_after_commit(self.services, receipt.task_id)
        return result

    def _finish(
        self, connection: Any, receipt: Receipt, document_digest: str, *, created: bool
    ) -> WriteTaskResult:
        """reserved -> task_created (if needed) -> committed, all inside ``connection``."""
        now = self.services.clock.now()
        if receipt.state is ReceiptState.RESERVED:
            if not receipts.mark_task_created(
                connection, receipt, holder=self.holder, document_digest=document_digest, now=now
            ):
                raise _HoldLost
            crash_point("write_task.before_commit")
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

    def _read(self) -> Receipt | None:
        with self.services.store.single_read() as connection:
            return receipts.get(connection, self.tenant, self.submission_id)

    def _converge(self, receipt: Receipt) -> WriteTaskResult | None:
        """Decide on an existing receipt; None means "read it again" (it changed under us)."""
        mismatch = self._mismatch(receipt)
        if mismatch is not None:
            return mismatch
        if receipt.state is ReceiptState.COMMITTED:
            return self._replay(receipt)
        if receipt.held_until is not None and receipt.held_until > self.services.clock.now():
            return self._wait_or_give_up(receipt)
        return self._recover(receipt)

    def _mismatch(self, receipt: Receipt) -> WriteTaskResult | None:
        if receipt.digest_schema_version != DIGEST_SCHEMA_VERSION:
            return self._conflict(
                receipt,
                ConflictCode.SCHEMA_MISMATCH,
                f"submission {self.submission_id!r} was first made with digest schema "
                f"{receipt.digest_schema_version}; use a new client_submission_id",
            )
        if receipt.request_digest != self.digest:
            return self._conflict(
                receipt,
                ConflictCode.DIGEST_MISMATCH,
                f"submission {self.submission_id!r} was first made with a different request; "
                "resend the original request, or use a new client_submission_id",
            )
        return None

    def _replay(self, receipt: Receipt) -> WriteTaskResult:
        assert receipt.result is not None
        first = receipt.result
        return WriteTaskResult(
            disposition=Disposition.REUSED,
            action_taken=False,
            task_id=first["task_id"],
            task_path=first["task_path"],
            client_submission_id=self.submission_id,
            request_digest=first["request_digest"],
            digest_schema_version=first["digest_schema_version"],
            receipt_state=ReceiptState.COMMITTED,
            idempotent=True,
        )

    def _wait_or_give_up(self, receipt: Receipt) -> WriteTaskResult | None:
        if time.monotonic() >= self.deadline:
            return self._conflict(
                receipt,
                ConflictCode.IN_PROGRESS,
                f"submission {self.submission_id!r} is being created by another call; "
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
        now = self.services.clock.now()
        with self.services.store.transaction() as connection:
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
        with self.services.store.snapshot() as connection:
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
        return (tenant, submission_id, digest) == (self.tenant, self.submission_id, self.digest)

    def _adopt(self, receipt: Receipt, document_digest: str) -> WriteTaskResult | None:
        """The TASK exists and matches: finish committing the receipt, create nothing."""
        try:
            with self.services.store.transaction() as connection:
                result = self._finish(connection, receipt, document_digest, created=False)
        except _HoldLost:
            return None
        publish_after_commit(self.services, receipt.task_id)
        return result

    def _refuse(self, receipt: Receipt, code: ConflictCode, message: str) -> WriteTaskResult:
        """A recovery fact contradicts the receipt: report it, change nothing but our hold."""
        with self.services.store.transaction() as connection:
            receipts.release_hold(
                connection, receipt, holder=self.holder, now=self.services.clock.now()
            )
        return self._conflict(receipt, code, message)

    # -- results ------------------------------------------------------------------------------

    def _result(
        self, receipt: Receipt, disposition: Disposition, state: ReceiptState
    ) -> WriteTaskResult:
        return WriteTaskResult(
            disposition=disposition,
            action_taken=disposition is Disposition.CREATED,
            task_id=receipt.task_id,
            task_path=receipt.task_path,
            client_submission_id=self.submission_id,
            request_digest=self.digest,
            digest_schema_version=DIGEST_SCHEMA_VERSION,
            receipt_state=state,
            idempotent=True,
        )

    def _conflict(self, receipt: Receipt, code: ConflictCode, message: str) -> WriteTaskResult:
        log.info("write_task conflict %s for submission %s", code.value, self.submission_id)
        return WriteTaskResult(
            disposition=Disposition.CONFLICT,
            action_taken=False,
            task_id=receipt.task_id,
            task_path=receipt.task_path,
            client_submission_id=self.submission_id,
            request_digest=self.digest,
            digest_schema_version=DIGEST_SCHEMA_VERSION,
            receipt_state=receipt.state,
            idempotent=True,
            conflict=ConflictInfo(code, message),
        )


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
