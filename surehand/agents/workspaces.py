"""Where a command agent's session works: ``SUREHAND_AGENT_WORKSPACE``, per role.

The setting is a comma list of ``[ROLE=]SPEC``; an entry with a role overrides the one without
for TASKs to that recipient. A SPEC is either

- ``/srv/repos/app``: that directory, shared by every session of the role, bound read-write
  into the sandbox; or
- ``worktree:/srv/repos/app``: a working tree of that repository for each TASK, on the branch
  ``surehand/<task id>`` (made from the repository's ``HEAD``, or the branch as the TASK last
  left it), under the work directory (``.worktrees/<task id>``, which the session sweep leaves
  alone: the branch is the TASK's work). A successor attempt of the TASK finds its
  predecessors' tree as they left it.

A TASK's tree is a **clone of its own** (``git clone --shared``: it borrows the repository's
objects read-only, writes its own), never a ``git worktree``: a worktree shares the
repository's git directory, and an agent that can write that directory can plant hooks or a
``core.fsmonitor`` the worker itself would run, and rewrite every other TASK's branch. So only
the clone is bound read-write into the sandbox, with the repository's object store read-only;
the clone's remotes are the repository's (a push goes where the repository's would). When a
session ends, the worker fetches the clone's ``surehand/<task id>`` into the repository
(:func:`publish`): the only ref of the repository a session's work can move is its own TASK's.
Every git command the worker runs for this is hardened (:mod:`surehand.agents.worker_git`).

The session's CLI gets the workspace as each needs it (``--add-dir`` for Claude Code, ``-C``
for Codex; :mod:`surehand.agents.presets`), and programs find it in ``SUREHAND_WORKSPACE``.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from surehand.agents import worker_git
from surehand.errors import AgentError, ConfigError

log = logging.getLogger(__name__)

SETTING = "SUREHAND_AGENT_WORKSPACE"
WORKTREE = "worktree:"
WORKTREES_DIR = ".worktrees"
BRANCH_PREFIX = "surehand/"
IDENTITY = ("user.name", "user.email")


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
        if worktree and worker_git.run(path, "rev-parse", "--git-common-dir") is None:
            raise ConfigError(
                f"{SETTING} entry {text!r}: {path} is not a git repository (worktree: needs "
                "one; git must be on PATH)",
                setting=SETTING,
            )
        return cls(path.resolve(), worktree)


@dataclass(frozen=True)
class Workspace:
    """A session's working tree, what must be bound for it to work there (path, writable),
    and for a TASK's clone: the repository, the TASK's branch and the repository's remotes
    (name, URL), the only places a scoped push rule lets its work go."""

    path: Path
    binds: tuple[tuple[Path, bool], ...]
    repo: Path | None = None
    branch: str | None = None
    remotes: tuple[tuple[str, str], ...] = ()


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


def _split(entry: str) -> tuple[str, str]:
    head, sep, rest = entry.partition("=")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", head.strip()):
        return head.strip(), rest.strip()
    return "", entry


def prepare(spec: Spec, task_id: str, work_dir: Path) -> Workspace:
    """The session's workspace: the directory itself, or the TASK's clone (made by the first
    attempt, found as it was left by its successors). AgentError when git cannot make it."""
    if not spec.worktree:
        return Workspace(spec.path, ((spec.path, True),))
    common = _common_dir(spec.path)
    tree = work_dir / WORKTREES_DIR / _safe(task_id)
    branch = f"{BRANCH_PREFIX}{_safe(task_id)}"
    if (tree / ".git").is_file():
        _convert_worktree(spec.path, common, tree, branch)
    elif not (tree / ".git").exists():
        _clone(spec.path, common, tree, branch)
    objects = common / "objects"
    return Workspace(
        tree,
        ((tree, True), (objects, False)),
        repo=spec.path,
        branch=branch,
        remotes=remotes_of(spec.path),
    )


def publish(workspace: Workspace) -> bool:
    """Bring the TASK's branch from its clone into the repository (forced: the branch is the
    TASK's to rewrite); False, logged, when git refuses (a clone its agent broke). Run by the
    worker after each session, hardened: git reads the clone as data only."""
    if workspace.repo is None or workspace.branch is None:
        return True
    ref = f"refs/heads/{workspace.branch}"
    done = worker_git.run(
        workspace.repo,
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        str(workspace.path),
        f"+{ref}:{ref}",
    )
    if done is None:
        log.warning(
            "could not bring %s from %s into %s; the repository keeps its last published state",
            workspace.branch,
            workspace.path,
            workspace.repo,
        )
    return done is not None


def remotes_of(repo: Path) -> tuple[tuple[str, str], ...]:
    """The repository's remotes as (name, URL), read as data."""
    listed = worker_git.run(repo, "config", "--get-regexp", r"^remote\..*\.url$") or ""
    found = []
    for line in listed.splitlines():
        key, _, url = line.partition(" ")
        found.append((key.removeprefix("remote.").removesuffix(".url"), url))
    return tuple(found)


def _clone(repo: Path, common: Path, tree: Path, branch: str) -> None:
    """A clone borrowing ``repo``'s objects, on ``branch`` (the repository's own, if the TASK
    published one, else a new one from HEAD), with the repository's remotes."""
    tree.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = tree.with_name(f"{tree.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    _must(tree.parent, "clone", "--quiet", "--shared", "--no-checkout", str(repo), str(partial))
    _adopt_remotes(partial, repo)
    published = worker_git.run(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
    start = published or worker_git.run(repo, "rev-parse", "--verify", "--quiet", "HEAD")
    if start is None:
        raise AgentError(f"{repo} has no commit to start {branch} from; nothing ran")
    _must(partial, "checkout", "--quiet", "-b", branch, start)
    partial.rename(tree)  # a crash before this leaves only the partial clone, made again


def _adopt_remotes(clone: Path, repo: Path) -> None:
    """The clone's remotes and committer identity become the repository's (its link back to
    ``repo`` goes: the worker, not the agent, brings the TASK's work there)."""
    _must(clone, "remote", "remove", "origin")
    for name, url in remotes_of(repo):
        _must(clone, "remote", "add", name, url)
    for key in IDENTITY:
        if value := worker_git.run(repo, "config", "--get", key):
            _must(clone, "config", key, value)


def _convert_worktree(repo: Path, common: Path, tree: Path, branch: str) -> None:
    """A ``git worktree`` of an earlier surehand becomes a clone in place: the files stay as
    the last attempt left them (uncommitted changes included), the index is the branch's, and
    the repository forgets the worktree."""
    admin = Path(tree.joinpath(".git").read_text().removeprefix("gitdir:").strip())
    staged = tree.with_name(f"{tree.name}.git-partial")
    shutil.rmtree(staged, ignore_errors=True)
    _must(tree.parent, "clone", "--quiet", "--shared", "--bare", str(repo), str(staged))
    (tree / ".git").unlink()
    staged.rename(tree / ".git")
    _must(tree, "config", "--bool", "core.bare", "false")
    _adopt_remotes(tree, repo)
    _must(tree, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
    _must(tree, "read-tree", "HEAD")  # the index only: the working files are left as they are
    if admin.parent == common / "worktrees":
        shutil.rmtree(admin, ignore_errors=True)


def _common_dir(repo: Path) -> Path:
    found = worker_git.run(repo, "rev-parse", "--git-common-dir")
    if found is None:
        raise AgentError(f"{repo} is no longer a git repository; nothing ran")
    return (repo / found).resolve()


def _safe(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", task_id)


def _must(repo: Path, *args: str) -> str:
    done = worker_git.run(repo, *args)
    if done is None:
        raise AgentError(f"git {args[0]} failed in {repo} while making a TASK's clone; nothing ran")
    return done
