"""Shared helpers for the write_task tests: requests, row counts, direct seeding of receipts
and TASKs (the way Stripe-style recovery points are tested), and a subprocess entry point.

Run as a program, it makes one ``write_task`` call against a database and prints the result
as one JSON line::

    python -m tests.submission_helpers --url URL --tenant T --id SID --request JSON [--gate]

With ``--gate`` it first prints ``ready`` and waits for a line on stdin, so that a test can
line several processes up behind one start signal. ``SUREHAND_*`` environment variables
(``SUREHAND_CRASH_AT``...) apply as usual.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import insert, select, update

from surehand.config import Settings
from surehand.digest import request_digest, sha256_hex
from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.fcop.render import render_task
from surehand.model import (
    DIGEST_SCHEMA_VERSION,
    Bucket,
    Task,
    TaskFields,
    task_path,
)
from surehand.requests import parse_task_request
from surehand.store import Store, numbering, receipts, task_columns, task_moves, tasks
from surehand.store import schema as tables

REPO = Path(__file__).resolve().parent.parent
TENANT = "acme"

BASE_REQUEST: dict[str, Any] = {
    "sender": "PM",
    "recipient": "DEV",
    "subject": "Fix login",
    "body": "Users cannot log in after the password reset.",
}


class Recording:
    """A publisher that records the TASK ids it was given (thread-safe)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, task: Task) -> None:
        with self._lock:
            self.ids.append(task.task_id)


def request(**overrides: Any) -> dict[str, Any]:
    """The base request with some fields replaced (``client_submission_id`` included)."""
    return {**BASE_REQUEST, **overrides}


def fields_of(data: Mapping[str, Any]) -> TaskFields:
    return parse_task_request(
        {k: v for k, v in data.items() if k != "client_submission_id"}
    ).to_fields()


def digest_of(data: Mapping[str, Any]) -> str:
    """The write-task-v1 digest of a request mapping, through the validating edge."""
    return request_digest(fields_of(data))


# -- counting and reading rows ---------------------------------------------------------------


class Counts(NamedTuple):
    """Row counts; compares equal to a plain ``(tasks, receipts)`` tuple."""

    tasks: int
    receipts: int


def counts(store: Store) -> Counts:
    """How many TASKs and receipts the store holds (every tenant)."""
    with store.snapshot() as connection:
        return Counts(tasks.count(connection), receipts.count(connection))


def receipt_row(store: Store, tenant: str, submission_id: str) -> tuple[Any, ...] | None:
    """The receipt's full row, every column, for byte-for-byte comparisons."""
    table = tables.receipts
    with store.snapshot() as connection:
        row = connection.execute(
            select(table).where(
                table.c.tenant == tenant, table.c.client_submission_id == submission_id
            )
        ).one_or_none()
    return None if row is None else tuple(row)


def counter_rows(store: Store) -> list[tuple[Any, ...]]:
    """(kind, day, last) of every number counter (its key, if any, left out; and not the row
    that only holds the key of shown row ids, ``store/opaque.py``)."""
    counters = tables.counters
    with store.snapshot() as connection:
        rows = connection.execute(
            select(counters.c.kind, counters.c.day, counters.c.last)
            .where(counters.c.kind != "ROWIDS")
            .order_by(counters.c.kind, counters.c.day)
        ).all()
    return [tuple(row) for row in rows]


def shown_id(store: Store, day: str, number: int) -> str:
    """The id of the day's ``number``-th TASK, presented under the day's key (numbering.py)."""
    counters = tables.counters
    with store.snapshot() as connection:
        secret = connection.execute(
            select(counters.c.secret).where(counters.c.kind == "TASK", counters.c.day == day)
        ).scalar_one()
    return f"TASK-{day}-{numbering.present(number, secret):03d}"


def task_ids(store: Store) -> list[str]:
    with store.snapshot() as connection:
        rows = connection.execute(select(tables.tasks.c.task_id).order_by(tables.tasks.c.task_id))
        return [str(value) for value in rows.scalars()]


def move_bucket(store: Store, task_id: str, to: Bucket, now: datetime) -> None:
    """Move a TASK to another bucket behind write_task's back (as a lifecycle move would)."""
    with store.transaction() as connection:
        moved = task_moves.update_if(
            connection,
            task_id,
            expect={"bucket": Bucket.INBOX.value},
            values={"bucket": to.value},
            now=now,
        )
    assert moved


# -- seeding (direct SQLAlchemy Core inserts) -------------------------------------------------


def seed_counter(store: Store, day: str, last: int) -> None:
    """Set the TASK counter of ``day`` as if ``last`` numbers had been handed out."""
    with store.transaction() as connection:
        existing = connection.execute(
            select(tables.counters.c.last).where(
                tables.counters.c.kind == "TASK", tables.counters.c.day == day
            )
        ).scalar_one_or_none()
        if existing is None:
            connection.execute(insert(tables.counters).values(kind="TASK", day=day, last=last))
        else:
            connection.execute(
                update(tables.counters)
                .where(tables.counters.c.kind == "TASK", tables.counters.c.day == day)
                .values(last=last)
            )


def seed_task(
    store: Store,
    *,
    task_id: str,
    data: Mapping[str, Any],
    tenant: str = TENANT,
    submission_id: str | None,
    now: datetime,
    tampered: bool = False,
) -> str:
    """Insert a TASK row (and nothing else) as write_task would have; returns its document
    digest. ``data`` is the request the TASK is made from. ``tampered`` stores a document that
    was edited after its digest was taken."""
    fields = fields_of(data)
    document = render_task(task_id, fields, created_at=now, submission_id=submission_id)
    document_digest = sha256_hex(document)
    if tampered:
        document += "edited by hand\n"
    with store.transaction() as connection:
        row = task_columns.new_row(
            task_id=task_id,
            tenant=tenant,
            fields=fields,
            submission_id=submission_id,
            request_digest=request_digest(fields),
            document=document,
            document_digest=document_digest,
            now=now,
        )
        task_columns.insert_row(connection, row)
    return document_digest


def seed_receipt(
    store: Store,
    *,
    submission_id: str,
    data: Mapping[str, Any],
    task_id: str,
    created_at: datetime,
    tenant: str = TENANT,
    document_digest: str = "0" * 64,
    schema_version: str = DIGEST_SCHEMA_VERSION,
    digest: str | None = None,
) -> dict[str, Any]:
    """Insert a committed receipt row (without its TASK); returns the creation result it
    carries."""
    fields = fields_of(data)
    path = task_path(Bucket.INBOX, task_id, fields.sender, fields.recipient)
    digest = digest or request_digest(fields)
    result = {
        "disposition": "created",
        "action_taken": True,
        "task_id": task_id,
        "task_path": path,
        "client_submission_id": submission_id,
        "request_digest": digest,
        "digest_schema_version": schema_version,
        "receipt_state": "committed",
        "idempotent": True,
        "conflict": None,
    }
    with store.transaction() as connection:
        connection.execute(
            insert(tables.receipts).values(
                receipts.committed_row(
                    tenant=tenant,
                    submission_id=submission_id,
                    schema_version=schema_version,
                    digest=digest,
                    task_id=task_id,
                    task_path=path,
                    document_digest=document_digest,
                    result=result,
                    now=created_at,
                )
            )
        )
    return result


# -- subprocesses -----------------------------------------------------------------------------


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child write_task process: ours without SUREHAND_* knobs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUREHAND_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _command(
    url: str, submission_id: str, data: Mapping[str, Any], tenant: str, gate: bool
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "tests.submission_helpers",
        "--url",
        url,
        "--tenant",
        tenant,
        "--id",
        submission_id,
        "--request",
        json.dumps(dict(data)),
    ]
    return [*command, "--gate"] if gate else command


def run_child(
    url: str,
    submission_id: str,
    data: Mapping[str, Any],
    *,
    tenant: str = TENANT,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """Run one write_task call in a fresh OS process and wait for it to end."""
    return subprocess.run(
        _command(url, submission_id, data, tenant, gate=False),
        cwd=REPO,
        env=dict(env) if env is not None else child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def child_result(completed: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert completed.returncode == 0, completed.stderr
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def run_children_at_once(
    count: int,
    url: str,
    submission_id: str,
    data: Sequence[Mapping[str, Any]],
    *,
    tenant: str = TENANT,
    timeout: float = 120.0,
) -> list[dict[str, Any]]:
    """Start ``count`` processes, wait until each is connected and ready, release them all
    at once, and return their results. ``data[i % len(data)]`` is process i's request."""
    processes = [
        subprocess.Popen(
            _command(url, submission_id, data[i % len(data)], tenant, gate=True),
            cwd=REPO,
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.strip() == "ready", (line, process.stderr.read() if process.stderr else "")
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        results = []
        for process in processes:
            out, err = process.communicate(timeout=timeout)
            assert process.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.submission_helpers")
    parser.add_argument("--url", required=True)
    parser.add_argument("--tenant", default=TENANT)
    parser.add_argument("--id", required=True)
    parser.add_argument("--request", required=True, help="the request as a JSON object")
    parser.add_argument("--gate", action="store_true", help="print ready, wait for stdin")
    args = parser.parse_args(argv)
    data = {**json.loads(args.request), "client_submission_id": args.id}
    store = Store(args.url, auto_upgrade=False)
    store.ensure_schema()
    services = Services(store=store, settings=Settings())
    counts(store)  # warm the connection so that the gate releases callers, not connects
    if args.gate:
        print("ready", flush=True)
        sys.stdin.readline()
    started = time.monotonic()
    result = write_task(services, data, tenant=args.tenant).to_dict()
    result["seconds"] = round(time.monotonic() - started, 4)
    print(json.dumps(result), flush=True)
    store.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
