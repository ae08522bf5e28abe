"""Hold notices: make a TASK held for review visible in Flower.

A held TASK has no session to show: its last session was lost and admission starts no
successor until an approver reviews the case. So when admission holds a TASK, a small Celery
task ``surehand.hold_notice(task_id, case_id, attempt)`` is sent to the default queue that
every worker consumes. Flower lists it beside the sessions with the TASK id and attempt as
arguments, and its result, ``{"task_id", "case_id", "attempt", "hold": "hold_for_review"}``,
says what to do. A notice is information only: losing or duplicating one changes nothing.

The service layer sends them (``Services.notify_hold``): the reconciler after a pass that held
something, and ``recover`` when it ended in a hold (:mod:`surehand.dispatcher.actions`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from celery import Celery, Task
from kombu.exceptions import KombuError

from surehand.queue.celery_app import DEFAULT_QUEUE

log = logging.getLogger(__name__)

HOLD_NOTICE_TASK = "surehand.hold_notice"
HOLD = "hold_for_review"


class HoldNoticeTask(Task):  # type: ignore[type-arg]
    """``surehand.hold_notice(task_id, case_id, attempt)``: echoes a hold so Flower shows it."""

    name = HOLD_NOTICE_TASK
    ignore_result = True

    def run(self, task_id: str, case_id: str, attempt: int) -> dict[str, Any]:
        return {
            "task_id": task_id,
            "case_id": case_id,
            "attempt": attempt,
            "hold": HOLD,
            "next": f"an approver runs `surehand review {case_id} --effect present|absent`",
        }


def register_hold_notice(app: Celery) -> None:
    """Register ``surehand.hold_notice`` on ``app`` only (workers run it; it only echoes)."""
    app.register_task(HoldNoticeTask())


def send_hold_notices(app: Celery, held: Iterable[Mapping[str, Any]]) -> int:
    """Send one notice per held case (``task_id``, ``case_id``, ``attempt``); best effort."""
    sent = 0
    for item in held:
        try:
            app.send_task(
                HOLD_NOTICE_TASK,
                args=[item["task_id"], item["case_id"], item["attempt"]],
                queue=DEFAULT_QUEUE,
                routing_key=DEFAULT_QUEUE,
            )
        except (KombuError, OSError) as exc:
            log.warning("hold notice for %s not sent: %s", item.get("task_id"), exc)
            continue
        sent += 1
    return sent
