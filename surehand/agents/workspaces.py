"""Where a command agent's session works: ``SUREHAND_AGENT_WORKSPACE``, per role.

The setting is a comma list of ``[ROLE=]SPEC``; an entry with a role overrides the one without
for TASKs to that recipient. A SPEC is either

- ``/srv/repos/app``: that directory, shared by every session of the role, bound read-write
  into the sandbox; or
- ``worktree:/srv/repos/app``: a fresh ``git worktree`` of that repository for each TASK, on
  the branch ``surehand/<task id>`` made from the repository's ``HEAD``, under the work
  directory (``.worktrees/<task id>``, which the session sweep leaves alone: the branch is the
  TASK's work). A successor attempt of the TASK finds its predecessors' tree as they left it.
  The worktree is bound read-write, and so is the repository's git directory (a commit writes
  its objects and the branch there): an agent can write any ref of that repository, never the
  files of its main checkout.

The session's CLI gets the workspace as each needs it (``--add-dir`` for Claude Code, ``-C``
for Codex; :mod:`surehand.agents.presets`), and programs find it in ``SUREHAND_WORKSPACE``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from surehand.errors import AgentError, ConfigError

SETTING = "SUREHAND_AGENT_WORKSPACE"
WORKTREE = "worktree:"
WORKTREES_DIR = ".worktrees"
_GIT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Spec:
    """One entry of the setting: a directory, or a repository to make worktrees of."""

    path: Path
    worktree: bool = False

    @classmethod
    def parse(cls, text: str) -> Spec:
        worktree = text.startswith(WORKTREE)
        path = Path(text.removeprefix(WORKTREE).strip())
        if not path.is_absolute() or not path.is_dir():
            raise ConfigError(
                f"{SETTING} entry {text!r}: name an absolute path to a directory that exists "
                "(the repository the agents work in), optionally after worktree:",
                setting=SETTING,
            )
        if worktree and _git(path, "rev-parse", "--git-common-dir") is None:
            raise ConfigError(
                f"{SETTING} entry {text!r}: {path} is not a git repository (worktree: needs "
                "one; git must be on PATH)",
                setting=SETTING,
            )
        return cls(path.resolve(), worktree)


@dataclass(frozen=True)
class Workspace:
    """A session's working tree and what must be bound (read-write) for it to work there."""

    path: Path
    binds: tuple[Path, ...]


@dataclass(frozen=True)
class Workspaces:
    """The setting resolved: the default entry and the per-role overrides."""

    default: Spec | None = None
    by_role: Mapping[str, Spec] = field(default_factory=dict)

    @classmethod
    def parse(cls, setting: str) -> Workspaces:
        """The setting's entries (ConfigError for a bad or repeated one)."""
        default: Spec | None = None
        by_role: dict[str, Spec] = {}
        for entry in (part.strip() for part in setting.split(",") if part.strip()):
            role, spec = _split(entry)
            if (role in by_role) if role else (default is not None):
                raise ConfigError(
                    f"{SETTING}: {role or 'the default'} is given twice", setting=SETTING
                )
            if role:
                by_role[role] = Spec.parse(spec)
            else:
                default = Spec.parse(spec)
        return cls(default, by_role)

    def for_role(self, role: str) -> Spec | None:
        """The entry for TASKs to ``role`` (its own, else the default; None: no workspace)."""
        return self.by_role.get(role, self.default)

    def shared_binds(self) -> tuple[Path, ...]:
        """The plain directories (bound for every session; worktrees are bound per TASK)."""
        specs = [self.default, *self.by_role.values()]
        return tuple(dict.fromkeys(s.path for s in specs if s is not None and not s.worktree))


def _split(entry: str) -> tuple[str, str]:
    head, sep, rest = entry.partition("=")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", head.strip()):
        return head.strip(), rest.strip()
    return "", entry


def prepare(spec: Spec, task_id: str, work_dir: Path) -> Workspace:
    """The session's workspace: the directory itself, or the TASK's worktree (made by the
    first attempt, found by its successors). AgentError when git cannot make it."""
    if not spec.worktree:
        return Workspace(spec.path, (spec.path,))
    common = _common_dir(spec.path)
    tree = work_dir / WORKTREES_DIR / _safe(task_id)
    if not (tree / ".git").exists():
        _add_worktree(spec.path, tree, f"surehand/{_safe(task_id)}")
    return Workspace(tree, (tree, common))


def _add_worktree(repo: Path, tree: Path, branch: str) -> None:
    tree.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _git(repo, "worktree", "prune")  # a tree removed by hand leaves its registration behind
    exists = _git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}") is not None
    args = [str(tree), branch] if exists else ["-b", branch, str(tree), "HEAD"]
    if _git(repo, "worktree", "add", *args) is None:
        raise AgentError(f"git could not add a worktree of {repo} at {tree} (branch {branch})")


def _common_dir(repo: Path) -> Path:
    found = _git(repo, "rev-parse", "--git-common-dir")
    if found is None:
        raise AgentError(f"{repo} is no longer a git repository; nothing ran")
    return (repo / found).resolve()


def _safe(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", task_id)


def _git(repo: Path, *args: str) -> str | None:
    """git's output in ``repo``; None when it fails (or git is missing)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
