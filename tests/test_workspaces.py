"""Where a session works (``SUREHAND_AGENT_WORKSPACE``): a directory or a fresh git worktree
per TASK, chosen per role; a successor finds its predecessor's tree; a program commits there
from inside the sandbox and never writes the repository's own checkout."""

# ruff: noqa: F811  (test functions take the fixtures imported below)

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from surehand.agents.workspaces import Spec, Workspaces, prepare
from surehand.errors import ConfigError
from tests.session_helpers import (  # noqa: F401  (harness fixture)
    Harness,
    committed_task,
    harness,
    reports_of,
)
from tests.skips import missing
from tests.test_command_agent import command_surehand


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "agent@example.com")
    git(path, "config", "user.name", "agent")
    (path / "README").write_text("app\n")
    git(path, "add", "README")
    git(path, "commit", "-q", "-m", "first")
    return path


def test_a_role_entry_overrides_the_default_and_other_roles_get_the_default(
    tmp_path: Path, repo: Path
) -> None:
    workspaces = Workspaces.parse(f"{tmp_path}, DEV=worktree:{repo}")

    assert workspaces.for_role("DEV") == Spec(repo.resolve(), worktree=True)
    assert workspaces.for_role("QA") == Spec(tmp_path.resolve())
    assert Workspaces.parse("").for_role("DEV") is None


@pytest.mark.parametrize(
    "setting",
    ["relative/repo", "DEV=/no/such/dir", "worktree:{tmp}", "DEV={tmp},DEV={tmp}", "{tmp},{tmp}"],
)
def test_a_bad_entry_is_a_config_error_naming_the_setting(tmp_path: Path, setting: str) -> None:
    with pytest.raises(ConfigError, match="SUREHAND_AGENT_WORKSPACE"):
        Workspaces.parse(setting.format(tmp=tmp_path))  # tmp_path is no git repository


def test_each_task_gets_its_own_worktree_on_its_own_branch_and_a_successor_finds_it(
    tmp_path: Path, repo: Path
) -> None:
    spec = Spec(repo, worktree=True)
    sessions = tmp_path / "sessions"

    first = prepare(spec, "T-1", sessions)
    (first.path / "work.txt").write_text("half done\n")
    again = prepare(spec, "T-1", sessions)  # the successor attempt
    other = prepare(spec, "T-2", sessions)

    assert again == first
    assert (again.path / "work.txt").read_text() == "half done\n"
    assert other.path != first.path
    assert not (other.path / "work.txt").exists()
    assert git(first.path, "branch", "--show-current") == "surehand/T-1"
    assert git(other.path, "branch", "--show-current") == "surehand/T-2"
    assert Path(git(repo, "rev-parse", "--git-common-dir")).name == ".git"
    assert first.binds == (first.path, (repo / ".git").resolve())


def test_a_worktree_removed_by_hand_is_made_again_on_the_tasks_branch(
    tmp_path: Path, repo: Path
) -> None:
    spec = Spec(repo, worktree=True)
    first = prepare(spec, "T-1", tmp_path / "sessions")
    (first.path / "work.txt").write_text("committed work\n")
    git(first.path, "add", "work.txt")
    git(first.path, "commit", "-q", "-m", "work")
    subprocess.run(["rm", "-rf", str(first.path)], check=True)

    again = prepare(spec, "T-1", tmp_path / "sessions")

    assert (again.path / "work.txt").read_text() == "committed work\n"


def test_a_sessions_program_commits_in_its_tasks_worktree_and_the_main_checkout_is_untouched(
    harness: Harness, tmp_path: Path, repo: Path
) -> None:
    if shutil.which("bwrap") is None:
        missing("bwrap (bubblewrap)")
    sh = command_surehand(
        harness,
        tmp_path,
        'cd "$SUREHAND_WORKSPACE"\n'
        "echo fixed > fix.txt\n"
        "git add fix.txt && git commit -q -m fix\n"
        "git branch --show-current\n"
        f"echo tampered > {repo}/README 2>/dev/null || echo checkout read-only\n",
        agent_workspace=f"DEV=worktree:{repo}",
        agent_sandbox="bwrap",
        agent_bind=f"{tmp_path}:ro",  # the script; the repository's checkout stays read-only
    )
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)

    assert (outcome.outcome, outcome.bucket) == ("settled", "review"), outcome
    [report] = reports_of(sh.store, task_id)
    assert report.body.splitlines() == [f"surehand/{task_id}", "checkout read-only"]
    assert git(repo, "show", f"surehand/{task_id}:fix.txt") == "fixed"
    assert (repo / "README").read_text() == "app\n"
    assert not (repo / "fix.txt").exists()
