"""``git.push``: does the remote's ref contain the commit that was to be pushed?

Asked by admission, in the worker or beat (never in the sandbox), with the hardened git of
:mod:`surehand.agents.worker_git` (no hooks, no file-system monitor, no ``ext::``, a scrubbed
environment) and a timeout. First ``git ls-remote`` of the one ref: the ref at the commit is
*present*; the remote answering without the ref is *absent*. A ref at another commit may have
moved on past it, so that ref is fetched into a scratch repository (a temporary directory,
removed after) and the commit is present if it is among the ref's history, absent if not.
Anything else -- the remote unreachable, git failing, the timeout -- is *inconclusive*.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from surehand.agents import worker_git
from surehand.agents.probes.args import GitPushArgs
from surehand.agents.probes.result import ProbeResult, inconclusive
from surehand.model import Operation

NAME = "git.push"
VERSION = 1
SCRATCH_REF = "refs/surehand-probe/pushed"


@dataclass(frozen=True)
class GitPushProbe:
    """The probe, with the seconds each git command may take."""

    timeout: float = 30.0

    def __call__(self, operation: Operation) -> ProbeResult:
        args = GitPushArgs.model_validate(dict(operation.probe_args or {}))
        return self.check(args)

    def check(self, args: GitPushArgs) -> ProbeResult:
        seen = {"remote": args.remote, "ref": args.ref, "commit": args.commit}
        listed = self._git(Path("/"), "ls-remote", "--refs", args.remote, args.ref)
        if listed is None:
            return inconclusive("the remote did not answer (git ls-remote failed)", **seen)
        remote_commit = _ref_commit(listed, args.ref)
        seen["remote_ref"] = remote_commit or "(absent)"
        if remote_commit is None:
            return ProbeResult(False, seen)
        if remote_commit == args.commit:
            return ProbeResult(True, seen)
        return self._contains(args, seen)

    def _contains(self, args: GitPushArgs, seen: dict[str, str]) -> ProbeResult:
        """Whether the ref's history (fetched into a scratch repository) has the commit."""
        with tempfile.TemporaryDirectory(prefix="surehand-probe-") as scratch:
            repo = Path(scratch)
            if self._git(repo, "init", "--quiet", "--bare") is None:
                return inconclusive("could not make a scratch repository", **seen)
            fetched = self._git(
                repo, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                "--no-recurse-submodules", args.remote, f"+{args.ref}:{SCRATCH_REF}",
            )  # fmt: skip
            if fetched is None:
                return inconclusive("the remote's ref could not be fetched", **seen)
            ancestor = self._status(repo, "merge-base", "--is-ancestor", args.commit, SCRATCH_REF)
        if ancestor is None:
            return inconclusive("git could not compare the commits", **seen)
        seen["contains"] = "yes" if ancestor else "no"
        return ProbeResult(ancestor, seen)

    def _git(self, repo: Path, *args: str) -> str | None:
        done = self._run(repo, *args)
        return done.stdout if done is not None and done.returncode == 0 else None

    def _status(self, repo: Path, *args: str) -> bool | None:
        """True (exit 0), False (exit 1: the commit is not an ancestor, or not fetched)."""
        done = self._run(repo, *args)
        if done is None or done.returncode not in (0, 1, 128):
            return None
        return done.returncode == 0

    def _run(self, repo: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(
                worker_git.command(repo, *args),
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env=worker_git.environment(),
                stdin=subprocess.DEVNULL,
                cwd=repo,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None


def _ref_commit(listed: str, ref: str) -> str | None:
    for line in listed.splitlines():
        commit, _, name = line.partition("\t")
        if name.strip() == ref:
            return commit.strip().lower()
    return None
