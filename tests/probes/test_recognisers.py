"""Journaled calls surehand recognises: ``git push`` in the TASK's clone names the git.push
probe (remote URL, ref and commit read by the worker), ``curl`` with an Idempotency-Key is
keyed; anything else is journaled as before. Through the hooks' real HTTP door too."""

from __future__ import annotations

from pathlib import Path

import pytest

from surehand.agents.claude_hook import HookPolicy
from surehand.agents.recognisers import Clone, Recognised, recognise
from surehand.agents.workspaces import Spec, prepare
from surehand.facade import Surehand
from surehand.mcp.session_server import SessionMcp
from surehand.model import RetryPolicy
from tests.git_remotes import Remote, git, plant_hooks
from tests.session_helpers import claimed, committed_task, operations_of
from tests.shared.session_hooks import decision, granted, hook

BRANCH = "surehand/TASK-1"


@pytest.fixture
def clone(remote: Remote, tmp_path: Path) -> Clone:
    """The TASK's clone, made the way the command agent makes it (``worktree:``)."""
    workspace = prepare(Spec(remote.work, worktree=True), "TASK-1", tmp_path / "sessions")
    (workspace.path / "work.txt").write_text("the TASK's work")
    git(workspace.path, "add", "work.txt")
    git(workspace.path, "commit", "-q", "-m", "work")
    return Clone(workspace.path, workspace.remotes)


def bash(command: str, clone: Clone, cwd: Path | None = None) -> Recognised | None:
    return recognise("Bash", {"command": command}, str(cwd or clone.path), clone)


def test_a_push_of_the_tasks_branch_names_the_probe_with_the_commit_the_worker_read(
    clone: Clone, remote: Remote
) -> None:
    head = git(clone.path, "rev-parse", "HEAD")
    found = bash(f"git push origin {BRANCH}", clone)
    assert found == Recognised(
        "git.push", {"remote": remote.url, "ref": f"refs/heads/{BRANCH}", "commit": head}
    )
    assert bash(f"git push -u origin HEAD:{BRANCH}", clone) == found
    assert bash(f"git -C {clone.path} push origin {BRANCH}", clone, cwd=Path("/")) == found


def test_a_push_to_a_refspec_with_another_destination_names_that_ref(clone: Clone) -> None:
    found = bash("git push origin HEAD:refs/heads/feature", clone)
    assert found is not None
    assert found.probe_args is not None
    assert found.probe_args["ref"] == "refs/heads/feature"


@pytest.mark.parametrize(
    "command",
    [
        "git push elsewhere main",  # not a remote of the repository
        "git push file:///tmp/other.git main",
        f"git push --delete origin {BRANCH}",
        f"git push origin :{BRANCH}",
        "git push --all origin",
        f"git push --dry-run origin {BRANCH}",
        f"cd /tmp && git push origin {BRANCH}",  # compound: not one call
        "git push origin no-such-branch",
        f"git -c core.sshCommand=x push origin {BRANCH}",
        "git status",
    ],
)
def test_other_commands_are_not_recognised(clone: Clone, command: str) -> None:
    assert bash(command, clone) is None


@pytest.mark.parametrize(
    "command",
    [
        # Options that take the next word: git reads "origin" as their value and pushes to
        # the remote the agent named after it (one the agent may have added to its clone).
        f"git push --repo origin {BRANCH}",
        f"git push -o origin {BRANCH}",
        f"git push -uo origin {BRANCH}",
        f"git push --push-option origin {BRANCH}",
        f"git push --receive-pack git-receive-pack origin {BRANCH}",
        f"git push --recurse-submodules=on-demand origin {BRANCH}",
        f"git push --signed origin {BRANCH}",
        f"git push -- origin {BRANCH}",
    ],
)
def test_a_push_with_an_option_the_recogniser_does_not_know_is_not_recognised(
    clone: Clone, command: str
) -> None:
    assert bash(command, clone) is None


def test_a_push_naming_no_refspec_is_not_recognised_its_refs_are_the_clones_config(
    clone: Clone, remote: Remote
) -> None:
    """``git push origin`` pushes what the clone's config says (``remote.origin.push``,
    ``push.default``), and the agent writes that config: here, another branch elsewhere."""
    git(clone.path, "branch", "other", "HEAD~1")
    git(clone.path, "config", "remote.origin.push", "refs/heads/other:refs/heads/elsewhere")
    git(clone.path, "push", "-q", "origin")
    assert git(remote.bare, "for-each-ref", "--format=%(refname)") == (
        "refs/heads/elsewhere\nrefs/heads/main"
    )  # not the TASK's branch: git did what the config said
    assert bash("git push origin", clone) is None
    assert bash("git push -u origin", clone) is None


def test_a_push_from_a_repository_nested_in_the_clone_is_not_recognised(
    clone: Clone, tmp_path: Path
) -> None:
    """A repository of the agent's inside its clone has remotes and refs of its own: the push
    is not the clone's, whatever the clone's remote and commit would say."""
    nested = clone.path / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "src").mkdir()
    assert bash(f"git -C vendor/lib push origin {BRANCH}", clone) is None
    assert bash(f"git push origin {BRANCH}", clone, cwd=nested / "src") is None
    assert bash(f"git -C {clone.path}/vendor push origin {BRANCH}", clone, cwd=tmp_path) is not None


def test_a_push_outside_the_tasks_clone_is_not_recognised(clone: Clone, tmp_path: Path) -> None:
    assert bash(f"git push origin {BRANCH}", clone, cwd=tmp_path) is None
    assert recognise("Bash", {"command": f"git push origin {BRANCH}"}, None, None) is None


def test_reading_the_commit_runs_nothing_planted_in_the_clone(clone: Clone, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plant_hooks(clone.path, marker)
    assert bash(f"git push origin {BRANCH}", clone) is not None
    assert not marker.exists()


def test_an_http_request_with_an_idempotency_key_is_keyed(clone: Clone) -> None:
    keyed = Recognised(None, None, "order-42", "keyed")
    assert bash("curl -X POST -H 'Idempotency-Key: order-42' https://api/x", clone) == keyed
    assert bash("curl --header=idempotency-key:order-42 https://api/x", clone) == keyed
    assert bash("http POST https://api/x Idempotency-Key:order-42", clone) == keyed
    assert bash("curl -X POST https://api/x", clone) is None


@pytest.mark.parametrize(
    "command",
    [
        # A second request without the key: a repeat of it is not deduplicated.
        "curl -H 'Idempotency-Key: k1' https://api/x --next -X POST https://api/y",
        "curl -H 'Idempotency-Key: k1' https://api/x -: -X POST https://api/y",
        # Two keys: which one the far side dedupes by is not what the journal says.
        "curl -H 'Idempotency-Key: k1' -H 'Idempotency-Key: k2' -X POST https://api/x",
        # Options read from a file the agent wrote may add requests or headers.
        "curl -K more.cfg -H 'Idempotency-Key: k1' -X POST https://api/x",
        "curl --config=more.cfg -H 'Idempotency-Key: k1' -X POST https://api/x",
        "curl -H @headers.txt -H 'Idempotency-Key: k1' -X POST https://api/x",
        "http --session=s POST https://api/x Idempotency-Key:k1",
    ],
)
def test_a_request_whose_key_does_not_cover_all_it_sends_is_not_keyed(
    clone: Clone, command: str
) -> None:
    assert bash(command, clone) is None


def test_the_hooks_journal_a_recognised_push_as_a_probed_intent(
    harness_sh: Surehand, mcp: SessionMcp, clone: Clone, remote: Remote
) -> None:
    task_id = committed_task(harness_sh)
    policy = HookPolicy(allowed=("mcp__surehand", "Bash"), clone=clone)
    grant = granted(mcp, claimed(harness_sh.services, task_id), policy)
    head = git(clone.path, "rev-parse", "HEAD")

    push = {"command": f"git push origin {BRANCH}"}
    assert decision(hook(grant, "pre", "toolu_1", push, cwd=str(clone.path))).startswith("allow")
    curl = {"command": "curl -H 'Idempotency-Key: k-1' https://api.example.com/x"}
    assert decision(hook(grant, "pre", "toolu_2", curl, cwd=str(clone.path))).startswith("allow")
    plain = {"command": "make deploy"}
    assert decision(hook(grant, "pre", "toolu_3", plain, cwd=str(clone.path))).startswith("allow")

    pushed, keyed, unrecognised = operations_of(harness_sh.store, task_id)
    assert pushed.name == "claude:Bash"
    assert pushed.probe == "git.push"
    assert pushed.probe_args == {
        "remote": remote.url,
        "ref": f"refs/heads/{BRANCH}",
        "commit": head,
    }
    assert (keyed.idempotency_key, keyed.retry_policy) == ("k-1", RetryPolicy.KEYED)
    assert (unrecognised.probe, unrecognised.idempotency_key) == (None, None)
