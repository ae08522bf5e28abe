"""``surehand show`` prints the whole TASK: body, latest REPORT and history in full, wrapped
to the terminal, never cut; text that looks like rich markup is printed as it is."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from surehand.cli.render import operations_table
from surehand.doors.labels import operation_label
from surehand.facade import Surehand
from surehand.model import OperationState
from tests.shared.cli import _run
from tests.shared.effects import op

WORDS = [f"w{n:03d}x" for n in range(150)]
LONG_TOKEN = "https://example.com/" + "/".join(f"segment{n}" for n in range(30))
MARKUP = "[bold]not-bold[/bold] and [/x]"  # neither styled nor a MarkupError


def _collapsed(text: str) -> str:
    """The output without box drawing and whitespace: a folded token reads whole again."""
    return re.sub(r"[\s│┃╭╮╰╯─━]", "", text)


def _assert_whole(shown: str, body: str) -> None:
    missing = [word for word in body.split() if word not in shown and len(word) < 40]
    assert missing == []
    assert LONG_TOKEN in _collapsed(shown)


@pytest.fixture
def full_task(tmp_path: Path) -> tuple[str, str, str, str]:
    """A TASK with a long body, a long REPORT and a long rejection reason in its history."""
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    body = " ".join(["Body:", *WORDS[:60], MARKUP, LONG_TOKEN, "end-of-body"])
    report = "\n".join(["Report first line.", " ".join([*WORDS[60:120], LONG_TOKEN]), "last."])
    reason = " ".join(["Rejected:", *WORDS[120:], "end-of-reason"])
    with Surehand(database_url=url) as sh:
        created = sh.write_task(sender="PM", recipient="DEV", subject="Long [/x]", body=body)
        task_id = created.task_id
        assert task_id is not None
        sh.transition(task_id, "claim", actor="DEV")
        sh.write_report(task_id=task_id, reporter="DEV", body=report)
        sh.transition(task_id, "submit", actor="DEV")
        sh.transition(task_id, "reject", actor="PM", reason=reason)
    return url, task_id, body, report + " " + reason


@pytest.mark.parametrize("columns", [80, 160])
def test_show_prints_body_report_and_history_in_full(
    full_task: tuple[str, str, str, str], columns: int
) -> None:
    url, task_id, body, report_and_reason = full_task
    shown = _run(url, "show", task_id, columns=columns)
    _assert_whole(shown, body)
    _assert_whole(shown, report_and_reason)
    assert MARKUP in shown
    assert max(len(line) for line in shown.splitlines()) <= columns


def test_tasks_prints_a_subject_that_looks_like_markup(
    full_task: tuple[str, str, str, str],
) -> None:
    url, task_id, _, _ = full_task
    listed = _run(url, "tasks", columns=160)
    assert task_id in listed
    assert "Long [/x]" in listed  # was rich.errors.MarkupError


def test_the_cli_and_the_console_say_the_same_of_an_effect_a_review_found_absent() -> None:
    # A reviewed-absent effect is stored failed; "failed" alone would read as if it had raised.
    absent = replace(
        op("open"), state=OperationState.FAILED, outcome={"probe": "absent", "source": "review"}
    )
    console = Console(width=200, record=True)

    console.print(operations_table([absent]))

    assert operation_label(absent) == "did not happen (confirmed by a review)"
    assert "did not happen (confirmed by a review)" in console.export_text()
