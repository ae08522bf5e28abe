"""Where a session works (``SUREHAND_AGENT_WORKSPACE``): a directory or a clone of its own per
TASK, chosen per role; a successor finds its predecessor's tree; a program commits there from
inside the sandbox, never writes the repository's own checkout or git directory, and nothing it
plants in its clone runs when the worker uses git outside the sandbox."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from surehand.agents import worker_git
from surehand.agents.claude_hook import HookPolicy
from surehand.agents.command import CommandAgent
from surehand.agents.context import SessionContext
from surehand.agents.workspaces import Spec, Workspaces, prepare, publish
from surehand.errors import ConfigError
from tests.session_helpers import Harness, claimed, committed_task, reports_of
from tests.shared.command_agent import command_surehand
from tests.shared.session_mcp import context_of
from tests.skips import missing


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
    assert (first.path / ".git").is_dir()  # a clone of its own, not a worktree's link
    assert first.binds == ((first.path, True), ((repo / ".git" / "objects").resolve(), False))


def test_a_tasks_clone_has_the_repositorys_remotes_and_identity_and_no_way_back_into_it(
    tmp_path: Path, repo: Path
) -> None:
    git(repo, "remote", "add", "origin", "https://git.example.com/app.git")

    workspace = prepare(Spec(repo, worktree=True), "T-1", tmp_path / "sessions")

    assert workspace.remotes == (("origin", "https://git.example.com/app.git"),)
    assert git(workspace.path, "remote", "-v").split() == [
        "origin", "https://git.example.com/app.git", "(fetch)",
        "origin", "https://git.example.com/app.git", "(push)",
    ]  # fmt: skip
    assert git(workspace.path, "config", "user.email") == "agent@example.com"


def test_a_worktree_removed_by_hand_is_made_again_on_the_tasks_branch(
    tmp_path: Path, repo: Path
) -> None:
    spec = Spec(repo, worktree=True)
    first = prepare(spec, "T-1", tmp_path / "sessions")
    (first.path / "work.txt").write_text("committed work\n")
    git(first.path, "add", "work.txt")
    git(first.path, "commit", "-q", "-m", "work")
    assert publish(first)  # as the worker does when a session ends
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


def test_a_worktree_of_an_earlier_surehand_becomes_a_clone_keeping_its_uncommitted_work(
    tmp_path: Path, repo: Path
) -> None:
    tree = tmp_path / "sessions" / ".worktrees" / "T-1"
    git(repo, "worktree", "add", "-q", "-b", "surehand/T-1", str(tree), "HEAD")
    (tree / "half.txt").write_text("not committed yet\n")
    (tree / "README").write_text("app, edited\n")

    workspace = prepare(Spec(repo, worktree=True), "T-1", tmp_path / "sessions")

    assert workspace.path == tree
    assert (tree / ".git").is_dir()
    assert git(tree, "branch", "--show-current") == "surehand/T-1"
    assert git(tree, "status", "--porcelain").split() == ["M", "README", "??", "half.txt"]
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_the_worker_runs_no_hook_or_fsmonitor_an_agent_planted_in_its_clone(
    tmp_path: Path, repo: Path
) -> None:
    """Everything git could run from a repository's own config, planted in a TASK's clone
    (the only git directory its agent can write), is never run by the worker's git: not when
    it brings the branch back, not when the successor or another TASK gets its tree."""
    spec, sessions = Spec(repo, worktree=True), tmp_path / "sessions"
    workspace = prepare(spec, "T-1", sessions)
    (workspace.path / "work.txt").write_text("done\n")
    git(workspace.path, "add", "work.txt")
    git(workspace.path, "commit", "-q", "-m", "work")
    ran = tmp_path / "ran"
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {ran}\nenv >> {ran}\n')
    evil.chmod(0o755)
    hooks = workspace.path / ".git" / "hooks"
    for hook in ("post-checkout", "reference-transaction", "pre-auto-gc", "post-merge"):
        (hooks / hook).write_text(evil.read_text())
        (hooks / hook).chmod(0o755)
    git(workspace.path, "config", "core.fsmonitor", str(evil))
    git(workspace.path, "config", "core.hooksPath", str(hooks))
    git(workspace.path, "config", "uploadpack.packObjectsHook", str(evil))

    assert publish(workspace)
    prepare(spec, "T-1", sessions)
    prepare(spec, "T-2", sessions)

    assert not ran.exists(), ran.read_text()
    assert git(repo, "show", "surehand/T-1:work.txt") == "done"


def test_the_workers_git_gets_none_of_the_workers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUREHAND_API_TOKENS", "SECRET-token-0123456789=ops:ADMIN:default")
    monkeypatch.setenv("GIT_DIR", "/elsewhere")

    env = worker_git.environment()

    assert "SUREHAND_API_TOKENS" not in env
    assert "GIT_DIR" not in env
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null"
    assert env["GIT_CONFIG_NOSYSTEM"] == "1"


HOSTILE_GIT = """\
cd "$SUREHAND_WORKSPACE"
if grep -q HOSTILE "$SUREHAND_TASK_FILE"; then
  common=$(git rev-parse --git-common-dir)
  printf '#!/bin/sh\\necho planted >> {ran}\\n' > "$common/hooks/post-checkout" 2>/dev/null
  chmod +x "$common/hooks/post-checkout" 2>/dev/null
  git config core.fsmonitor "echo fsmonitor >> {ran}; :" 2>/dev/null
  printf '#!/bin/sh\\necho planted >> {ran}\\n' > {repo}/.git/hooks/post-checkout 2>/dev/null \\
    || echo "repository's hooks read-only"
  git update-ref refs/heads/surehand/{victim} HEAD && echo "rewrote the victim's ref here"
  echo hostile > {repo}/.git/refs/heads/surehand/{victim} 2>/dev/null \\
    || echo "repository's refs read-only"
else
  echo "$SUREHAND_TASK_ID" > work.txt
  git add work.txt && git commit -q -m "$SUREHAND_TASK_ID"
  echo committed
fi
"""


def test_a_hostile_agent_cannot_arm_git_against_the_worker_or_move_another_tasks_branch(
    harness: Harness, tmp_path: Path, repo: Path
) -> None:
    """An agent plants a post-checkout hook and an fsmonitor wherever its git directory is,
    and rewrites another TASK's branch: the next TASK's tree is made by the worker without
    running either, and the other TASK's branch is as its own session left it."""
    if shutil.which("bwrap") is None:
        missing("bwrap (bubblewrap)")
    ran = tmp_path / "ran"
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    sh = command_surehand(
        harness,
        scripts,
        HOSTILE_GIT.format(ran=ran, repo=repo, victim="none"),
        agent_workspace=f"DEV=worktree:{repo}",
        agent_sandbox="bwrap",
        agent_bind=f"{tmp_path}:ro",  # the script; the repository stays read-only
    )
    victim = committed_task(sh)
    assert sh.run_session(victim).outcome == "settled"
    victim_head = git(repo, "rev-parse", f"surehand/{victim}")
    (scripts / "agent.sh").write_text(HOSTILE_GIT.format(ran=ran, repo=repo, victim=victim))

    hostile = committed_task(sh, body="HOSTILE: arm git against the worker")
    assert sh.run_session(hostile).outcome == "settled"
    later = committed_task(sh)
    assert sh.run_session(later).outcome == "settled"

    assert not ran.exists(), ran.read_text()  # no planted hook ran, in or out of the sandbox
    [report] = reports_of(sh.store, hostile)
    assert "repository's hooks read-only" in report.body
    assert "repository's refs read-only" in report.body
    assert git(repo, "rev-parse", f"surehand/{victim}") == victim_head
    assert git(repo, "show", f"surehand/{later}:work.txt") == later


class _GrantRecorded(Exception):
    """Raised by the recording door: the session need not start for the test."""


class _RecordingDoor:
    def __init__(self) -> None:
        self.policies: list[HookPolicy | None] = []

    def grant(self, ctx: SessionContext, hooks: HookPolicy | None = None) -> object:
        self.policies.append(hooks)
        raise _GrantRecorded

    def revoke(self, grant: object) -> None:
        raise AssertionError("nothing was granted")

    def door(self) -> tuple[int, Path]:
        raise AssertionError("no door is needed")


def test_a_worktree_sessions_push_rule_names_its_repositorys_remotes_and_no_other(
    harness: Harness, repo: Path
) -> None:
    git(repo, "remote", "add", "upstream", "https://git.example.com/app.git")
    door = _RecordingDoor()
    settings = harness.settings(
        agents="DEV=command", command_agent="claude", agent_workspace=f"DEV=worktree:{repo}"
    )
    agent = CommandAgent.from_settings(settings, lambda _settings: door)  # type: ignore[arg-type,return-value]
    sh = harness.surehand()
    session = claimed(sh.services, committed_task(sh))

    with pytest.raises(_GrantRecorded):
        agent(context_of(session))

    [policy] = door.policies
    assert policy is not None
    assert policy.git_remotes == ("upstream",)
