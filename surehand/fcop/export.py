"""The FCoP workspace mirror: TASK and REPORT files derived from the store, rebuildable any time.

Layout (reference/fcop.md section 1)::

    <dir>/fcop/_lifecycle/<bucket>/TASK-YYYYMMDD-NNN-SENDER-to-RECIPIENT.md
    <dir>/fcop/reports/REPORT-YYYYMMDD-NNN-REPORTER-to-RECIPIENT.md

The store is the truth and the mirror only follows it: an export reads one consistent snapshot,
writes every file atomically (a temp file in the destination folder, then ``os.replace``), and
then removes the TASK/REPORT files the snapshot no longer accounts for, e.g. the copy a TASK
left behind in its old bucket. New copies are published before stale ones are removed, the
same order as FCoP's atomic move. Nothing outside those folders is touched, and files in them
that are not TASK or REPORT documents (a README, say) are left alone.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection

from surehand.fcop.render import render_report, render_task, report_filename
from surehand.model import Bucket, EventKind, Task, task_filename
from surehand.requests import validate_tenant
from surehand.store import Store, events, tasks
from surehand.store import reports as report_rows

PAGE = 500
# Only files the mirror itself writes are ever removed: TASK/REPORT documents, and temp files
# that a crashed export left behind (old enough that no running export can still own them).
_DOCUMENT = re.compile(r"^(?:TASK|REPORT)-\d{8}-\d{3,}-.+\.md$")
_TEMP = re.compile(r"^\.(?:TASK|REPORT)-.+\.tmp$")
ABANDONED_AFTER_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """How many TASK and REPORT files the mirror holds, and how many stale files it removed."""

    tasks: int
    reports: int
    removed: int


def export_workspace(store: Store, directory: Path, *, tenant: str | None = None) -> ExportSummary:
    """Write the mirror of every TASK and REPORT (of one tenant, if given) under ``directory``."""
    scope = validate_tenant(tenant) if tenant is not None else None
    with store.snapshot() as connection:
        task_files, report_files = _documents(connection, scope)
    root = Path(directory) / "fcop"
    folders = [root / "_lifecycle" / bucket.value for bucket in Bucket] + [root / "reports"]
    wanted = {root / path: text for path, text in (task_files | report_files).items()}
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)  # all five buckets exist, even when empty
    for path, text in wanted.items():
        _write_atomically(path, text)
    removed = sum(_remove_stale(folder, wanted.keys()) for folder in folders)
    return ExportSummary(tasks=len(task_files), reports=len(report_files), removed=removed)


def _documents(connection: Connection, tenant: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """Relative path -> document text for every TASK and every REPORT in the snapshot."""
    task_files: dict[str, str] = {}
    report_files: dict[str, str] = {}
    for task in _all_tasks(connection, tenant):
        name = task_filename(task.task_id, task.fields.sender, task.fields.recipient)
        task_files[f"_lifecycle/{task.bucket.value}/{name}"] = _task_document(connection, task)
        for report in report_rows.for_task(connection, task.task_id):
            text = render_report(report, thread_key=task.fields.thread_key)
            report_files[f"reports/{report_filename(report)}"] = text
    return task_files, report_files


def _all_tasks(connection: Connection, tenant: str | None) -> Iterator[Task]:
    # Paging inside one snapshot sees a fixed set of rows, so no TASK is skipped or repeated.
    offset = 0
    while page := tasks.list_tasks(connection, tenant=tenant, limit=PAGE, offset=offset):
        yield from page
        offset += len(page)


def _task_document(connection: Connection, task: Task) -> str:
    """The TASK file, its front matter carrying the append-only ``transitions`` list."""
    moves = events.history(connection, task.task_id, EventKind.TRANSITION)
    return render_task(
        task.task_id,
        task.fields,
        created_at=task.created_at,
        submission_id=task.client_submission_id,
        transitions=moves,
    )


def _write_atomically(path: Path, text: str) -> None:
    """Publish ``text`` at ``path`` whole or not at all; unchanged files are not rewritten."""
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp, path)  # the commit point: readers see the old file or the new one
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _remove_stale(folder: Path, wanted: AbstractSet[Path]) -> int:
    """Remove the mirror's files in ``folder`` that the snapshot does not account for."""
    stale = [path for path in folder.iterdir() if _is_stale(path, wanted)]
    for path in stale:
        path.unlink(missing_ok=True)
    return len(stale)


def _is_stale(path: Path, wanted: AbstractSet[Path]) -> bool:
    if not path.is_file() or path in wanted:
        return False
    if _DOCUMENT.match(path.name):
        return True
    age = time.time() - path.stat().st_mtime
    return bool(_TEMP.match(path.name)) and age > ABANDONED_AFTER_SECONDS
