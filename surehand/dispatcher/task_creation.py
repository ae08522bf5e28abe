"""What the ways of creating a TASK share: the call, the TASK's document, rows and result.

``write_task``'s submission path and its legacy path (:mod:`surehand.dispatcher.submissions`)
render the FCoP document, insert the TASK with its creation event, and answer under the call's
identity, as the replay of a committed receipt (:mod:`surehand.dispatcher.replay`) answers;
this module holds those pieces so that neither of the two imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from surehand.digest import sha256_hex
from surehand.dispatcher.context import Services
from surehand.errors import ValidationFailed
from surehand.fcop.render import render_task
from surehand.model import (
    DIGEST_SCHEMA_VERSION,
    Action,
    Bucket,
    Disposition,
    EventKind,
    ReceiptState,
    TaskFields,
    WriteTaskResult,
)
from surehand.store import creation, dependencies, events, task_columns


@dataclass(frozen=True)
class SubmissionCall:
    """One write_task call with a submission id: its services, tenant, fields and digest."""

    services: Services
    tenant: str
    submission_id: str
    fields: TaskFields
    digest: str
    acting: Mapping[str, Any] | None = None  # an ADMIN acting for the sender (principals.py)

    def result(
        self, task_id: str, path: str, disposition: Disposition, state: ReceiptState
    ) -> WriteTaskResult:
        """The call's result for the TASK at ``path`` (no conflict)."""
        return write_result(task_id, path, disposition, self.submission_id, self.digest, state)


def write_result(
    task_id: str,
    path: str,
    disposition: Disposition,
    submission_id: str | None,
    digest: str,
    state: ReceiptState | None,
    schema_version: str = DIGEST_SCHEMA_VERSION,
) -> WriteTaskResult:
    """Every ``write_task`` answer (no conflict): ``action_taken`` when this call created the
    TASK, ``idempotent`` when a submission id makes retries safe."""
    return WriteTaskResult(
        disposition=disposition,
        action_taken=disposition is Disposition.CREATED,
        task_id=task_id,
        task_path=path,
        client_submission_id=submission_id,
        request_digest=digest,
        digest_schema_version=schema_version,
        receipt_state=state,
        idempotent=submission_id is not None,
    )


def render(
    task_id: str, fields: TaskFields, submission_id: str | None, now: datetime
) -> tuple[str, str]:
    """The TASK's FCoP document and its SHA-256 (the receipt's document digest)."""
    document = render_task(task_id, fields, created_at=now, submission_id=submission_id)
    return document, sha256_hex(document)


def insert_task(
    connection: Any,
    *,
    task_id: str,
    tenant: str,
    fields: TaskFields,
    submission_id: str | None,
    digest: str,
    document: tuple[str, str],
    now: datetime,
    acting: Mapping[str, Any] | None = None,
    receipt: Mapping[str, Any] | None = None,
) -> str:
    """Insert the TASK row, its outbox row, its creation event and its dependencies' rows
    (with ``receipt``, the committed receipt first: :func:`surehand.store.creation.insert_created`);
    returns the document digest."""
    text, document_digest = document
    row = task_columns.new_row(
        task_id=task_id,
        tenant=tenant,
        fields=fields,
        submission_id=submission_id,
        request_digest=digest,
        document=text,
        document_digest=document_digest,
        now=now,
    )
    event = creation_event(task_id, fields, now, acting)
    creation.insert_created(connection, receipt=receipt, task=row, event=event)
    return document_digest


def creation_event(
    task_id: str, fields: TaskFields, now: datetime, acting: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The history's first event: created into ``inbox`` by the sender; ``acting`` records
    the ADMIN principal who created it on the sender's behalf, if one did."""
    return events.row(
        task_id=task_id,
        kind=EventKind.TRANSITION,
        by=fields.sender,
        at=now,
        action=Action.CREATE.value,
        to_bucket=Bucket.INBOX,
        data=acting,
    )


def check_dependencies(services: Services, tenant: str, fields: TaskFields) -> None:
    """Refuse ``depends_on`` naming a TASK that does not exist in ``tenant`` (typed, naming
    the field). A new TASK's id is allocated after this check and TASKs are never deleted, so
    no existing TASK can depend on it: a cycle (the TASK itself included) cannot form."""
    if not fields.depends_on:
        return
    with services.store.snapshot() as connection:
        missing = dependencies.unknown(connection, tenant, fields.depends_on)
    if missing:
        raise ValidationFailed(
            "depends_on",
            f"no TASK {', '.join(missing)} in this tenant: a TASK may depend only on TASKs that "
            "exist already (so no cycle can form); create the dependency first",
        )
