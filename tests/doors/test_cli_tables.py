"""``surehand tasks`` and ``surehand cases`` never cut an id (issue 30, item 7): at 80 columns
and narrower every TASK and case id is printed whole; the subject wraps and optional columns
give way first.

Before: at 80 columns every TASK id read ``TASK-20261206…`` and case ids were cut the same way.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from surehand.cli.common import EXIT_TIMEOUT
from surehand.dispatcher.claims import claim
from surehand.facade import Surehand
from surehand.testing import ManualClock
from tests.procs import SUREHAND
from tests.shared.cli import _run

LONG_SUBJECT = "Fix the login page so that a long subject wraps instead of pushing ids off"


@pytest.fixture
def long_roles_store(tmp_path: Path) -> tuple[str, list[str], list[str]]:
    """A store with TASKs between long role names and two interruption cases."""
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    clock = ManualClock()
    with Surehand(database_url=url, clock=clock) as sh:
        task_ids = [
            str(sh.write_task(sender="ADMIN", recipient=role, subject=LONG_SUBJECT).task_id)
            for role in ("QA_LEAD_REVIEWERS", "DEV", "OPS_ON_CALL_ROTATION")
        ]
        for task_id in task_ids[:2]:  # running, but no lease was ever taken: lost
            assert claim(sh.services, task_id, worker="gone", message_id=None) is not None
        sh.reconcile()  # suspected lost...
        clock.advance(3600)
        sh.reconcile()  # ...and, a grace window later, lost: a case each
        case_ids = [case.case_id for case in sh.cases()]
    assert len(case_ids) == 2
    return url, task_ids, case_ids


@pytest.mark.parametrize("columns", [80, 60, 40])
def test_tasks_prints_whole_task_ids(
    long_roles_store: tuple[str, list[str], list[str]], columns: int
) -> None:
    url, task_ids, _ = long_roles_store
    shown = _run(url, "tasks", columns=columns)
    assert [task_id for task_id in task_ids if task_id not in shown] == []
    assert max(len(line) for line in shown.splitlines()) <= columns
    assert "Fix the login" in shown  # the subject wraps
    if columns == 80:
        assert "bucket" in shown  # and optional columns are shown where they fit


@pytest.mark.parametrize("columns", [80, 50])
def test_cases_prints_whole_case_and_task_ids(
    long_roles_store: tuple[str, list[str], list[str]], columns: int
) -> None:
    url, task_ids, case_ids = long_roles_store
    shown = _run(url, "cases", columns=columns)
    assert [case_id for case_id in case_ids if case_id not in shown] == []
    assert [task_id for task_id in task_ids[:2] if task_id not in shown] == []
    assert max(len(line) for line in shown.splitlines()) <= columns
    if columns == 80:
        assert "admission" in shown


def test_the_watched_table_keeps_whole_ids_too(
    long_roles_store: tuple[str, list[str], list[str]],
) -> None:
    """``tasks --watch`` renders the same fitted table live (here until its timeout)."""
    url, task_ids, _ = long_roles_store
    done = subprocess.run(
        [*SUREHAND, "tasks", "--watch", "--interval", "0.2", "--timeout", "1"],
        env={**os.environ, "SUREHAND_DATABASE_URL": url, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_TIMEOUT, done.stderr
    assert [task_id for task_id in task_ids if task_id not in done.stdout] == []
