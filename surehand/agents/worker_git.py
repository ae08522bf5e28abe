"""The worker's own git, hardened against every repository an agent could have written.

An agent owns its TASK's clone (its ``.git/config``, its hooks, its refs), and before
workspaces were clones it could write the repository's shared git directory too. Whatever git
runs *outside* the sandbox -- the worker making a clone, reading remotes, fetching a TASK's
branch back -- must therefore never execute anything such a repository names:

- hooks and the file-system monitor are off on every command line
  (``-c core.hooksPath=/dev/null -c core.fsmonitor=false``): command-line settings outrank any
  repository's own;
- the ``ext::`` transport (which runs a command) is refused, only ``file`` is used;
- the environment is scrubbed: none of the worker's variables (its URLs and tokens, a
  ``GIT_DIR`` or ``GIT_SSH_COMMAND``) reach git, and neither the system's nor the worker
  user's global git configuration is read (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL``), so
  no credential helper, filter driver or alias of theirs runs either;
- objects fetched from an agent's clone are checked (``transfer.fsckObjects``).

What a repository's config can still do here is only what git reads as data (a remote's URL,
``uploadpack.*`` settings that git honours from protected configuration only).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

HARDENED = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "protocol.file.allow=always",
    "-c",
    "transfer.fsckObjects=true",
    "-c",
    "safe.directory=*",  # a clone owned by SUREHAND_AGENT_USER is read as data, never run
)
TIMEOUT_SECONDS = 120.0
_PASSED = ("PATH", "LANG", "LANGUAGE", "TZ")


def environment(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """What git gets of the worker's environment: the path and locale, nothing else."""
    env = os.environ if source is None else source
    kept = {name: env[name] for name in _PASSED if name in env}
    kept.update({name: value for name, value in env.items() if name.startswith("LC_")})
    return {
        **kept,
        "HOME": "/nonexistent",  # no ~/.gitconfig, no credential store of the worker's user
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
    }


def command(repo: Path, *args: str) -> list[str]:
    """The hardened command line of ``git -C repo ARGS``."""
    return ["git", *HARDENED, "-C", str(repo), *args]


def run(repo: Path, *args: str) -> str | None:
    """git's standard output in ``repo`` (stripped); None when it fails or git is missing."""
    try:
        done = subprocess.run(
            command(repo, *args),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
            env=environment(),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
