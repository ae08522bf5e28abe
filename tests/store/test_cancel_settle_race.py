"""A cancel that loses the race with its session's settle: the session wrote its REPORT
(the TASK went to review) before its stop watch read the request. The approver then sends it
back for rework: the recorded cancel must not leave it ``active`` with nothing to run it (no
attempt running, no case, no hold, every claim refused) -- it is archived."""

from __future__ import annotations

import pytest

from surehand.agents.context import SessionContext
from surehand.dispatcher.claims import claim
from surehand.model import Bucket, ReportStatus
from tests.recovery_helpers import Rig

pytestmark = pytest.mark.rig(stop_check_seconds=30)


def test_a_cancelled_task_whose_session_settled_first_is_archived_when_sent_back(
    rig: Rig,
) -> None:
    def agent(ctx: SessionContext) -> str:
        rig.sh.cancel(ctx.task.task_id, reason="not needed any more", actor="PM")
        return "done before the stop watch looked"

    rig.sh.agent("DEV")(agent)
    task_id = rig.new_task()
    rig.sh.run_session(task_id)
    assert rig.task(task_id).bucket is Bucket.REVIEW  # the settle won the race
    assert rig.task(task_id).cancel is not None

    rig.sh.transition(task_id, "reject", actor="PM", reason="redo it")

    task = rig.task(task_id)
    assert claim(rig.services, task_id, worker="w", message_id=None) is None
    assert task.bucket is Bucket.ARCHIVE, f"left {task.bucket.value}, hold={task.hold}"
    reports = rig.reports(task_id)
    assert [r.status for r in reports] == [ReportStatus.DONE, ReportStatus.ABORTED]
    assert "Cancelled by PM" in reports[-1].body
