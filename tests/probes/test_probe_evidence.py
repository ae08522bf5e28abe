"""What a probe saw is shown where the case is read: ``surehand show`` and the case page."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from surehand.api import create_app
from surehand.cli.render import probes_table
from tests.git_remotes import Remote
from tests.recovery_helpers import Rig
from tests.shared.console_actions import TOKENS, signed_in
from tests.shared.probe_admission import interrupted_push

pytestmark = pytest.mark.rig(api_tokens=TOKENS)


def held_push(rig: Rig, remote: Remote, tmp_path: Path) -> str:
    commit = remote.commit("the TASK's work")
    task_id = interrupted_push(rig, remote, commit, url=(tmp_path / "gone.git").as_uri())
    rig.lose(task_id)
    return task_id


def test_show_lists_each_probe_asked_with_what_it_saw(
    rig: Rig, remote: Remote, tmp_path: Path
) -> None:
    task_id = held_push(rig, remote, tmp_path)
    table = probes_table(rig.sh.cases(task_id=task_id))
    assert table is not None
    console = Console(width=200, record=True)
    console.print(table)
    shown = console.export_text()
    assert "git.push@1" in shown
    assert "inconclusive" in shown
    assert "gone.git" in shown
    assert probes_table([]) is None


def test_the_case_page_shows_the_probe_its_args_and_what_it_saw(
    rig: Rig, remote: Remote, tmp_path: Path
) -> None:
    task_id = held_push(rig, remote, tmp_path)
    [case] = rig.sh.cases(task_id=task_id)
    client, _csrf = signed_in(create_app(rig.sh), "pm")

    page = client.get(f"/ui/cases/{case.case_id}").text

    assert "What the probes saw" in page
    assert 'data-probe-answer="inconclusive"' in page
    assert "refs/heads/feature" in page
    assert "did not answer" in page
