"""``write_task``: create a TASK exactly once per (tenant, client_submission_id).

A create is one transaction, in which the TASK store joins the receipt's transaction (DESIGN.md
section 3): allocate the task number, insert the receipt -- written ``committed`` with the full
result and the document digest -- the TASK, its outbox row and its creation event, commit. On
Postgres that is one statement (:mod:`surehand.store.creation`). A crash anywhere before the
commit leaves nothing behind; after it, every retry replays the result
(:mod:`surehand.dispatcher.replay`). No receipt is ever written short of ``committed``, so none
needs recovering. Concurrent callers with one id converge on the unique (tenant, id) key: the
database makes the others wait for the first commit, then they read the committed receipt and
answer ``reused``.

This module is the one place a created TASK is published: :func:`write_task` hands it to the
outbox's publisher (``dispatch.after_create``) after the commit, off the caller's path where a
background publisher runs, for every caller -- the doors' ``actions.write_task`` and a
session's delegation alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from surehand.clock import utc_day
from surehand.crashpoints import CrashPoint, crash_point
from surehand.digest import request_digest
from surehand.dispatcher import replay
from surehand.dispatcher.context import Services
from surehand.dispatcher.dispatch import after_create
from surehand.dispatcher.task_creation import (
    SubmissionCall,
    check_dependencies,
    insert_task,
    render,
    write_result,
)
from surehand.errors import DuplicateKey, StoreError
from surehand.model import (
    DIGEST_SCHEMA_VERSION,
    Bucket,
    Disposition,
    Receipt,
    ReceiptState,
    TaskFields,
    WriteTaskResult,
    task_path,
)
from surehand.principals import Principal, acting_for
from surehand.requests import TaskRequest, parse_task_request, validate_tenant
from surehand.store import counters, receipts

_MAX_COLLISIONS = 3
# Opens the transaction a TASK is created in (see write_task's ``writer``).
Writer = Callable[[], AbstractContextManager[Connection]]


def write_task(
    services: Services,
    request: TaskRequest | Mapping[str, Any],
    *,
    tenant: str,
    principal: Principal | None = None,
    writer: Writer | None = None,
) -> WriteTaskResult:
    """Create a TASK, or recover the result of the first call with the same submission id.

    ``sender`` is ``principal``'s role; only an ADMIN principal may name another sender, and
    the creation event records it. ``principal`` None: a trusted in-process caller.
    ``writer``: the transaction the creation commits in (a session's fenced one, for a
    delegated child: :mod:`surehand.dispatcher.delegation`); it needs a submission id.
    """
    parsed = parse_task_request(request)
    tenant = validate_tenant(tenant)
    acting = acting_for(principal, parsed.sender, "sender")
    fields = parsed.to_fields()
    check_dependencies(services, tenant, fields)
    digest = request_digest(fields)
    if parsed.client_submission_id is None:
        result = _create_legacy(services, fields, digest, tenant, acting)
    else:
        call = SubmissionCall(services, tenant, parsed.client_submission_id, fields, digest, acting)
        result = _Submission(call, writer).run()
    if result.action_taken and result.task_id is not None:
        after_create(services, result.task_id)  # committed: publish it (never raises)
    return result


def _new_task_id(connection: Any, now: datetime, ahead: int | None = None) -> str:
    """The id of a TASK created at ``now``: the number is ``ahead`` (allocated for the same
    UTC day) or allocated here. One ``now`` per create, so the id's date, its number's day
    and ``created_at`` agree even when a create spans midnight."""
    day = utc_day(now)
    number = ahead if ahead is not None else counters.next_number(connection, "TASK", day)
    return f"TASK-{day}-{number:03d}"


def _create_legacy(
    services: Services, fields: TaskFields, digest: str, tenant: str, acting: dict[str, Any]
) -> WriteTaskResult:
    """No submission id: create a TASK with no retry guarantee (``idempotent: false``)."""
    now = services.clock.now()
    with services.store.transaction() as connection:
        task_id = _new_task_id(connection, now)
        insert_task(
            connection,
            task_id=task_id,
            tenant=tenant,
            fields=fields,
            submission_id=None,
            digest=digest,
            document=render(task_id, fields, None, now),
            now=now,
            acting=acting,
        )
    path = task_path(Bucket.INBOX, task_id, fields.sender, fields.recipient)
    return write_result(task_id, path, Disposition.CREATED, None, digest, None)


class _Submission:
    """One write_task call with a submission id: create, or answer from the existing receipt."""

    def __init__(self, call: SubmissionCall, writer: Writer | None = None) -> None:
        self.call = call
        self.writer = writer

    def run(self) -> WriteTaskResult:
        for _ in range(_MAX_COLLISIONS):
            now = self.call.services.clock.now()
            # A retry (the common case after a lost response) costs one read; on Postgres the
            # same statement allocates the TASK number when there is no receipt yet.
            receipt, ahead = self.call.services.store.receipt_or_number(
                self.call.tenant, self.call.submission_id, utc_day(now)
            )
            if receipt is None:
                created = self._create_at_once(now, ahead)
                if created is not None:
                    return created
                receipt = self._read()  # another caller committed it first
            if receipt is not None:
                return replay.answer(self.call, receipt)
            # The insert hit a unique key, yet this submission has no receipt: the number the
            # counter handed out belongs to another receipt. Never spin on it.
        raise StoreError(
            "the TASK counter handed out a number that another submission already holds (was "
            "the database restored from an older backup?); nothing was written. Move the "
            "counters row past the highest task number and retry"
        )

    def _create_at_once(self, now: datetime, ahead: int | None) -> WriteTaskResult | None:
        """Number (unless allocated ``ahead``), receipt, TASK and event in one transaction;
        None if the id was taken."""
        call = self.call
        try:
            # One statement on Postgres, one transaction on SQLite: all or nothing either way.
            with self._writer() as connection:
                task_id = _new_task_id(connection, now, ahead)
                path = task_path(Bucket.INBOX, task_id, call.fields.sender, call.fields.recipient)
                result = call.result(task_id, path, Disposition.CREATED, ReceiptState.COMMITTED)
                document = render(task_id, call.fields, call.submission_id, now)
                crash_point(CrashPoint.WRITE_TASK_BEFORE_COMMIT)
                insert_task(
                    connection,
                    task_id=task_id,
                    tenant=call.tenant,
                    fields=call.fields,
                    submission_id=call.submission_id,
                    digest=call.digest,
                    document=document,
                    now=now,
                    acting=call.acting,
                    receipt=receipts.committed_row(
                        tenant=call.tenant,
                        submission_id=call.submission_id,
                        schema_version=DIGEST_SCHEMA_VERSION,
                        digest=call.digest,
                        task_id=task_id,
                        task_path=path,
                        document_digest=document[1],
                        result=result.to_dict(),
                        now=now,
                    ),
                )
        except DuplicateKey as error:
            if error.table not in ("receipts", "unknown"):
                raise
            return None
        crash_point(CrashPoint.WRITE_TASK_AFTER_COMMIT)  # committed, neither answered nor published
        return result

    def _writer(self) -> AbstractContextManager[Connection]:
        """One statement on Postgres, unless the TASK has dependencies (their rows make it
        several: a transaction)."""
        if self.writer is not None:
            return self.writer()
        store = self.call.services.store
        return store.transaction() if self.call.fields.depends_on else store.one_write()

    def _read(self) -> Receipt | None:
        call = self.call
        with call.services.store.single_read() as connection:
            return receipts.get(connection, call.tenant, call.submission_id)
