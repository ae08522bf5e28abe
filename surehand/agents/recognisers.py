"""Journaled calls that surehand recognises: a ``git push`` becomes a probed intent, a
``curl`` with an ``Idempotency-Key`` header a keyed one.

Claude Code's hooks journal every effectful call (:mod:`surehand.mcp.session_hooks`), as an
intent without key or probe: after a crash mid-call it is held for a person. Two calls agents
make all the time can say more, decided here by the worker (outside the sandbox) from the
command line alone and what the worker reads itself:

- ``git push REMOTE REFSPEC`` in the TASK's clone (:mod:`surehand.agents.workspaces`), to a
  remote of the repository, names the built-in ``git.push`` probe with the remote's URL (as
  the worker read it from the repository, not the clone's config the agent can write), the
  destination ref, and the commit its source pointed to when the call was made (read by the
  worker's hardened git). A push the probe later finds on the remote is not pushed again.
- ``curl`` (or ``http``/``https``) with an ``Idempotency-Key`` header is recorded under the
  ``keyed`` retry policy with that key: the far side dedupes a repeat with the same key.

Anything else -- a compound command, options that rewrite or delete refs, a remote or
directory outside the TASK's clone -- is not recognised and is journaled as before.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from surehand.agents import git_rules, worker_git

SHELL_OPERATORS = re.compile(r"[;&|<>`$()\n\\]")
# The options a recognised push may carry: none takes a value from the next word (``-o x``,
# ``--repo x`` would make git read the remote the recogniser took as their value) and none
# changes which refs go where. Anything else leaves the call unrecognised.
PUSH_FLAGS = frozenset(
    {"--set-upstream", "--force", "--force-if-includes", "--quiet", "--verbose", "--progress",
     "--no-progress", "--porcelain", "--atomic", "--no-verify", "--force-with-lease"}
)  # fmt: skip
PUSH_SHORT = frozenset("ufqv")
KEY_HEADER = re.compile(r"\A\s*idempotency-key\s*:\s*(\S+)\s*\Z", re.IGNORECASE)
HTTP_CLIENTS = frozenset({"curl", "http", "https"})


@dataclass(frozen=True)
class Clone:
    """The TASK's clone as the worker knows it: where it is and the repository's remotes."""

    path: Path
    remotes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Recognised:
    """What a recognised call is journaled with, besides its name and args."""

    probe: str | None = None
    probe_args: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    retry_policy: str = "none"
    kind: str = field(default="", compare=False)


def recognise(
    tool: str, tool_input: Mapping[str, Any], cwd: str | None, clone: Clone | None
) -> Recognised | None:
    """The recognition of one call, or None (journaled as an unrecognised call)."""
    command = str(tool_input.get("command", "")) if tool == "Bash" else ""
    if not command or SHELL_OPERATORS.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words and Path(words[0]).name in HTTP_CLIENTS:
        return keyed_request(words)
    if clone is not None and git_rules.is_git(words):
        return git_push(words, cwd, clone)
    return None


# Options that send more than the one keyed request, or read options and headers from a file
# the agent wrote: a request they add may carry no key, or another one.
UNKEYED_OPTIONS = ("--next", "--config", "--session", "--session-read-only")


def keyed_request(words: Sequence[str]) -> Recognised | None:
    """An HTTP request carrying one ``Idempotency-Key``: keyed (curl ``-H``/``--header``,
    httpie ``Name:value``). Not when the command sends requests the key may not cover
    (``--next``), reads options or headers from a file (``-K``, ``-H @file``, httpie
    sessions), or names two keys."""
    keys: set[str] = set()
    headers = iter(words)
    for word in headers:
        header = word
        if word in ("-H", "--header"):
            header = next(headers, "")
        elif word.startswith("--header="):
            header = word.removeprefix("--header=")
        elif word.startswith("-H"):
            header = word.removeprefix("-H")
        elif _reads_more(word):
            return None
        if header.startswith("@"):
            return None
        match = KEY_HEADER.match(header)
        if match:
            keys.add(match.group(1))
    if len(keys) != 1:
        return None
    [key] = keys
    if not re.fullmatch(r"[\x21-\x7e]{1,255}", key):
        return None
    return Recognised(None, None, key, "keyed", kind="keyed request")


def _reads_more(word: str) -> bool:
    if word.startswith("--"):
        return word.partition("=")[0] in UNKEYED_OPTIONS
    # A cluster of curl's short options: -K (a config file) or -: (--next) among them.
    return word.startswith("-") and bool({"K", ":"} & set(word[1:]))


def git_push(words: Sequence[str], cwd: str | None, clone: Clone) -> Recognised | None:
    """``git [-C DIR] push [FLAGS] REMOTE REFSPEC`` in the clone, to one of its remotes."""
    try:
        git = git_rules.parse(words)
    except git_rules.GitRefused:
        return None
    if git.subcommand != "push" or not _inside(clone.path, cwd, git.directories):
        return None
    positional = [arg for arg in git.args if not arg.startswith("-")]
    if not all(_known_flag(arg) for arg in git.args if arg.startswith("-")):
        return None
    if len(positional) != 2:  # without a refspec git pushes what the clone's config says
        return None
    url = _remote_url(positional[0], clone.remotes)
    target = _target(clone.path, positional[1])
    if url is None or target is None:
        return None
    ref, commit = target
    args = {"remote": url, "ref": ref, "commit": commit}
    return Recognised("git.push", args, kind="git push")


def _known_flag(arg: str) -> bool:
    if arg.startswith("--"):
        return arg in PUSH_FLAGS or arg.startswith("--force-with-lease=")
    return len(arg) > 1 and set(arg[1:]) <= PUSH_SHORT


def _inside(clone: Path, cwd: str | None, directories: Sequence[str]) -> bool:
    """Whether git runs in the clone itself: in it or a directory of it, with no repository
    of the agent's (a ``.git`` of its own) between there and the clone's top."""
    where = Path(cwd) if cwd else clone
    for directory in directories:
        where = where / directory
    try:
        where, top = where.resolve(), clone.resolve()
        if not where.is_relative_to(top):
            return False
        return not any(
            (step / ".git").exists()
            for step in (where, *where.parents)
            if step != top and step.is_relative_to(top)
        )
    except OSError:
        return False


def _remote_url(remote: str, remotes: Sequence[tuple[str, str]]) -> str | None:
    """The URL the worker read for a remote named or given by URL (None: not the TASK's)."""
    for name, url in remotes:
        if remote in (name, url):
            return url
    return None


def _target(clone: Path, refspec: str) -> tuple[str, str] | None:
    """(destination ref, commit of the source now) of a one-ref refspec, read by the worker."""
    source, colon, destination = refspec.removeprefix("+").partition(":")
    if not source or (colon and not destination):
        return None  # ":ref" deletes; "src:" is not a push of one ref
    if not colon:
        destination = source
    if destination == "HEAD":
        branch = worker_git.run(clone, "symbolic-ref", "--quiet", "--short", "HEAD")
        if not branch:
            return None
        destination = branch
    commit = worker_git.run(clone, "rev-parse", "--verify", "--quiet", f"{source}^{{commit}}")
    if not commit:
        return None
    ref = destination if destination.startswith("refs/") else f"refs/heads/{destination}"
    return ref, commit
