"""See why, decide simply (issue 32, item 5): each attempt keeps the tail of what its agent
printed, shown by the console, ``surehand show`` and the API; a held TASK whose attempt
declared nothing asks its approver "run again, or stop here?"."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from surehand.agents.outputs import TAIL
from surehand.api import create_app
from surehand.facade import Surehand
from surehand.model import Admission, AttemptState
from tests.session_helpers import Harness, attempts_of, committed_task, read_task
from tests.shared.ui import csrf_of, sign_in

TOKENS = "pm=alice:PM:default,dev=dave:DEV:default"
REASON = "the spec names no staging cluster; nothing to rotate"


def command_dev(harness: Harness, tmp_path: Path, script: str, **settings: object) -> Surehand:
    path = tmp_path / "agent.sh"
    path.write_text(script, encoding="utf-8")
    settings.setdefault("agent_bind", str(tmp_path))
    return harness.surehand(agents="DEV=command", command_agent=f"sh {path}", **settings)


def failed_with_reason(
    harness: Harness, tmp_path: Path, **settings: object
) -> tuple[Surehand, str]:
    """A command agent that prints its reason on standard output and exits 3."""
    script = f'echo "working on it"\necho "{REASON}"\nexit 3\n'
    sh = command_dev(harness, tmp_path, script, **settings)
    task_id = committed_task(sh)
    assert sh.run_session(task_id).outcome == "failed"
    sh.reconcile()
    return sh, task_id


def test_a_command_that_printed_its_reason_fails_with_it_and_keeps_its_output(
    harness: Harness, tmp_path: Path
) -> None:
    sh, task_id = failed_with_reason(harness, tmp_path)

    [attempt] = attempts_of(sh.store, task_id)
    assert attempt.error == f"AgentError: command exited with 3: working on it\n{REASON}"
    assert attempt.details is not None
    assert attempt.details["output"] == {"stdout": f"working on it\n{REASON}", "stderr": ""}
    # A plain program's effects are not observed: held at its first failure, as before.
    assert "observed" not in attempt.details
    assert read_task(sh.store, task_id).hold is not None


def test_the_output_kept_is_bounded_to_its_tail(harness: Harness, tmp_path: Path) -> None:
    script = "i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done\necho last >&2\nexit 1\n"
    sh = command_dev(harness, tmp_path, script)
    task_id = committed_task(sh)
    sh.run_session(task_id)

    [attempt] = attempts_of(sh.store, task_id)
    assert attempt.details is not None
    stdout = attempt.details["output"]["stdout"]
    assert TAIL - 16 < len(stdout.encode()) <= TAIL
    assert stdout.endswith("line2999")
    assert attempt.details["output"]["stderr"] == "last"
    assert attempt.error == "AgentError: command exited with 1: last"


def test_surehand_show_prints_what_the_failed_attempt_printed(
    harness: Harness, tmp_path: Path
) -> None:
    sh, task_id = failed_with_reason(harness, tmp_path)

    shown = subprocess.run(
        [sys.executable, "-m", "surehand", "show", task_id],
        env={"SUREHAND_DATABASE_URL": sh.store.url, "COLUMNS": "200", "PATH": "/usr/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout

    assert "--- stdout ---" in shown
    assert REASON in shown


def test_the_api_returns_each_attempt_with_its_output(harness: Harness, tmp_path: Path) -> None:
    sh, task_id = failed_with_reason(harness, tmp_path, api_tokens=TOKENS)
    client = TestClient(create_app(sh), base_url="http://127.0.0.1")

    answer = client.get(f"/v1/tasks/{task_id}/attempts", headers={"Authorization": "Bearer pm"})

    assert answer.status_code == 200, answer.text
    [attempt] = answer.json()["attempts"]
    assert attempt["state"] == AttemptState.FAILED.value
    assert REASON in attempt["details"]["output"]["stdout"]


def test_the_console_asks_run_again_or_stop_for_a_held_attempt_that_declared_nothing(
    harness: Harness, tmp_path: Path
) -> None:
    sh, task_id = failed_with_reason(harness, tmp_path, api_tokens=TOKENS)
    [case] = sh.cases(task_id=task_id)
    assert case.admission is Admission.HOLD_FOR_REVIEW
    client = TestClient(create_app(sh), base_url="http://127.0.0.1", follow_redirects=False)
    sign_in(client, "pm")

    task_page = client.get(f"/ui/tasks/{task_id}").text
    case_page = client.get(f"/ui/cases/{case.case_id}").text

    assert REASON in task_page
    assert "run it again, or stop here" in task_page
    assert "Run it again, or stop here?" in case_page
    assert "Did the interrupted work happen?" not in case_page
    assert REASON in case_page
    answer = client.post(
        f"/ui/cases/{case.case_id}/review",
        data={"effect": "absent", "note": "fixed the spec", "csrf_token": csrf_of(case_page)},
    )
    assert answer.status_code in (200, 303), answer.text
    [decided] = sh.cases(task_id=task_id)
    assert decided.admission is Admission.REEXECUTE


def test_the_console_shows_when_the_next_automatic_retry_is_due_and_each_error(
    harness: Harness, tmp_path: Path
) -> None:
    script = 'echo "API Error: 529 overloaded_error"\nexit 1\n'
    sh = command_dev(
        harness,
        tmp_path,
        script,
        api_tokens=TOKENS,
        retry_declared_roles="DEV",
        retry_overload_backoff_seconds="600",
    )
    task_id = committed_task(sh)
    assert sh.run_session(task_id).outcome == "failed"
    sh.reconcile()
    [case] = sh.cases(task_id=task_id)
    assert case.retry_at is not None
    client = TestClient(create_app(sh), base_url="http://127.0.0.1", follow_redirects=False)
    sign_in(client, "pm")

    page = client.get(f"/ui/tasks/{task_id}").text

    [notice] = re.findall(r'<p class="notice retry"[^>]*>(.*?)</p>', page, re.S)
    assert "Automatic retry: attempt 2 of 3" in notice
    assert f"{case.retry_at:%Y-%m-%d %H:%M:%S}" in notice
    assert "model API overloaded" in notice
    assert "attempt 1: AgentError: command exited with 1" in notice
    assert "529 overloaded_error" in notice
