"""``surehand up --demo``: submit one TASK to the demo agent and follow it to its REPORT.

This is the README's first command. It shows the whole path in a few seconds: write_task
creates the TASK in ``inbox``, a session claims it (``active``, attempt 1), the demo agent
declares and performs one effect and returns, and the session writes the REPORT and moves the
TASK to ``review``.
"""

from __future__ import annotations

import threading
import time
import uuid

from surehand.cli.common import console, emit_event
from surehand.cli.render import BUCKET_STYLE
from surehand.facade import Surehand
from surehand.model import AttemptState, Bucket

DEMO_TIMEOUT_S = 60.0
SETTLED = (Bucket.REVIEW, Bucket.DONE)


def run_demo(sh: Surehand, stop: threading.Event, *, as_json: bool = False) -> bool:
    """Submit the demo TASK and print its moves until it has a REPORT; True on success."""
    result = sh.write_task(
        sender="PM",
        recipient="DEV",
        subject="Say hello from the demo agent",
        body="Write a short greeting to answer.txt and report where it is.",
        client_submission_id=f"demo-{uuid.uuid4().hex[:12]}",
    )
    task_id = result.task_id or ""
    _say(
        as_json, {"event": "submitted", **result.to_dict()}, f"submitted [bold]{task_id}[/] PM→DEV"
    )
    seen: Bucket | None = None
    deadline = time.monotonic() + DEMO_TIMEOUT_S
    while not stop.is_set() and time.monotonic() < deadline:
        task = sh.get_task(task_id)
        if task.bucket is not seen:
            seen = task.bucket
            attempt = f" (attempt {task.epoch})" if task.epoch else ""
            style = BUCKET_STYLE[seen.value]
            _say(
                as_json,
                {"event": "bucket", "task_id": task_id, "bucket": seen.value},
                f"  → [{style}]{seen.value}[/]{attempt}",
            )
        if task.bucket in SETTLED:
            return _show_report(sh, task_id, as_json=as_json)
        attempts = sh.attempts(task_id)
        if attempts and attempts[-1].state is AttemptState.FAILED:
            _say(
                as_json,
                {"event": "failed", "error": attempts[-1].error},
                f"[red]the session failed[/]: {attempts[-1].error}",
            )
            return False
        stop.wait(0.1)
    _say(as_json, {"event": "timeout", "task_id": task_id}, f"[red]{task_id} did not finish[/]")
    return False


def _show_report(sh: Surehand, task_id: str, *, as_json: bool) -> bool:
    reports = sh.reports(task_id)
    if not reports:
        return False
    report = reports[-1]
    _say(
        as_json,
        {"event": "report", **report.to_dict()},
        f"  REPORT by {report.reporter} ({report.status.value}): {report.body}",
    )
    if not as_json:
        console.print(f"See it all with: surehand show {task_id}")
    return True


def _say(as_json: bool, record: dict[str, object], text: str) -> None:
    if as_json:
        emit_event(record)
    else:
        console.print(text, soft_wrap=True)
