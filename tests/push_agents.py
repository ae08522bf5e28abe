"""An agents module whose agent pushes the TASK's commit to a real git remote, declaring the
push with the built-in ``git.push`` probe (no probe registration anywhere), for
``test_probe_push_processes.py``. ``PUSH_WORK``: a clone with a commit to build on;
``PUSH_REMOTE``: the URL pushed to. The commit is made the same in every attempt (fixed
dates), so a successor pushes what its predecessor would have.

This module must stay cheap to import and must not import the test suite.
"""

from __future__ import annotations

import os
import subprocess

from surehand.agents.context import SessionContext

WORK_ENV = "PUSH_WORK"
REMOTE_ENV = "PUSH_REMOTE"
FIXED = {
    "GIT_AUTHOR_NAME": "agent",
    "GIT_AUTHOR_EMAIL": "agent@example.invalid",
    "GIT_COMMITTER_NAME": "agent",
    "GIT_COMMITTER_EMAIL": "agent@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def _git(*args: str) -> str:
    env = {**os.environ, **FIXED, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(
        ["git", "-C", os.environ[WORK_ENV], *args],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return done.stdout.strip()


def task_commit(task_id: str) -> str:
    """The TASK's commit: the same id in every attempt."""
    return _git("commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", f"work for {task_id}")


def push(ctx: SessionContext) -> str:
    """Push the TASK's commit to refs/heads/<task id>, declared with the git.push probe."""
    task_id = ctx.task.task_id
    commit = task_commit(task_id)
    ref = f"refs/heads/{task_id}"
    remote = os.environ[REMOTE_ENV]
    ctx.operation(
        "git.push",
        {"ref": ref},
        lambda: _git("push", "-q", remote, f"{commit}:{ref}"),
        probe="git.push",
        probe_args={"remote": remote, "ref": ref, "commit": commit},
    )
    return f"pushed {commit} in attempt {ctx.attempt.number}"
