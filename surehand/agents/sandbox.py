"""Where a command agent's program runs: a bubblewrap sandbox, or (where none works) a fallback.

``SUREHAND_AGENT_SANDBOX`` chooses: ``bwrap``, ``none``, or ``auto`` (the default: ``bwrap``
where it works on this host). Each process finds out once (:func:`sandbox_for`); the worker
says at start which mode runs and why, and so does ``surehand check``. ``auto`` never falls
back to ``none`` on its own: where bwrap does not work, command agents are refused (a
ConfigError at worker start) until ``none`` is chosen explicitly.

**bwrap** (bubblewrap) starts the program in namespaces of its own:

- PID: it sees only its own processes in ``/proc`` (no sibling agent, no worker, no
  ``/proc/<pid>/environ`` of theirs), and when the namespace's first process ends the kernel
  kills every process left in it, daemons and double forks included. That first process is
  bwrap's, started with the session's filtered environment, so its ``/proc/1/environ`` holds
  nothing the program lacks.
- user, with every capability dropped: root in the sandbox cannot remount or unmount anything.
- mount: a view built from an allowlist (:mod:`surehand.agents.view`): the system's programs
  and libraries, a part of ``/etc``, the Python surehand runs on, the program's own files, the
  session directory (the only writable place besides what the operator binds in with
  ``SUREHAND_AGENT_BIND`` or a workspace), sized private tmpfs for ``/tmp``, ``/dev/shm`` and
  ``/run``; nothing else of the host (its homes, ``/var``, the checkout's dotfiles).
- network (``SUREHAND_AGENT_NETWORK``): ``egress``, the default, and ``none`` give it a
  network namespace of its own, loopback only; the session MCP server is reached at its URL
  through the portal (:mod:`surehand.agents.portal`) and the worker's gateway
  (:mod:`surehand.agents.gateway`), and with ``egress`` the hosts ``SUREHAND_AGENT_EGRESS``
  lists through the gateway's allowlisting proxy. ``host`` shares the worker's network: an
  explicit opt-in, warned about at start.

**none** runs the program in the trampoline's process group with the trampoline as a child
subreaper: a process that leaves the group (``setsid``, a double fork) is still the
trampoline's descendant and is killed with the session; one that escapes while its parent
dies at the very moment the trampoline is SIGKILLed is not. The program sees the host's
processes, files and network as the worker's user does. See docs/agents/sandbox.md, "What an
agent can reach".
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from surehand.agents import view
from surehand.config import Settings
from surehand.errors import ConfigError

BWRAP = "bwrap"
NONE = "none"
EGRESS, HOST = "egress", "host"  # network modes (and NONE)
DEFAULT_TMPFS_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class Sandbox:
    """The resolved mode of this process and why; :meth:`wrap` confines one program."""

    mode: str  # BWRAP or NONE
    why: str
    network: str = HOST  # EGRESS, NONE or HOST (always HOST without bwrap)
    binary: str | None = None

    @property
    def own_network(self) -> bool:
        """Whether the program gets a network namespace of its own (egress, none)."""
        return self.mode == BWRAP and self.network != HOST

    def describe(self) -> str:
        """One line for the worker's start and ``surehand check``."""
        if self.mode == BWRAP:
            kinds = ["PID", "user", "IPC", "mount", *(["network"] if self.own_network else [])]
            namespaces = f"{', '.join(kinds[:-1])} and {kinds[-1]}"
            return f"bwrap: {namespaces} namespaces, capabilities dropped ({self.why})"
        return f"none: process group and subreaper only ({self.why})"

    def wrap(
        self,
        program: Sequence[str],
        *,
        session_dir: Path,
        hidden: Sequence[Path],
        binds: Sequence[tuple[Path, bool]],
        portal: Sequence[str] = (),
        program_mounts: Sequence[view.Mount] = (),
        tmpfs_bytes: int = DEFAULT_TMPFS_BYTES,
    ) -> list[str]:
        """The command line that runs ``program`` confined (as it is, in mode ``none``).

        ``hidden``: paths the program must not see; ``binds``: (path, writable) to bind in;
        ``portal``: the command that must run first inside the sandbox, in front of
        ``program`` (the session server's door when the network is cut); ``program_mounts``:
        what the program's own installation needs in the view (:func:`view.program_mounts`);
        ``tmpfs_bytes``: the size of the sandbox's ``/tmp`` and ``/dev/shm`` each."""
        if self.mode != BWRAP:
            return list(program)
        assert self.binary is not None
        return [
            self.binary,
            *_namespaces(self.network),
            *_view(session_dir, hidden, binds, program_mounts, tmpfs_bytes),
            "--chdir",
            str(session_dir),
            "--",
            *portal,
            *program,
        ]


def _namespaces(network: str) -> list[str]:
    flags = [
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-user",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
    ]
    return flags if network == HOST else [*flags, "--unshare-net"]


def _view(
    session_dir: Path,
    hidden: Sequence[Path],
    binds: Sequence[tuple[Path, bool]],
    program: Sequence[view.Mount],
    tmpfs_bytes: int,
) -> list[str]:
    return view.arguments(session_dir, hidden, binds, program=program, tmpfs_bytes=tmpfs_bytes)


def sandbox_for(settings: Settings) -> Sandbox:
    """The sandbox this process uses for ``settings`` (found out once per mode and network);
    ConfigError when it cannot confine as asked: bwrap asked for (or ``auto``) where it does
    not run, or a network of its own asked for explicitly without bwrap."""
    sandbox = _resolve(settings.agent_sandbox, settings.agent_network)
    explicit = "agent_network" in settings.model_fields_set
    if sandbox.mode != BWRAP and explicit and settings.agent_network != HOST:
        raise ConfigError(
            f"SUREHAND_AGENT_NETWORK={settings.agent_network} needs the bwrap sandbox, and "
            f"{sandbox.why}: an agent without it shares the worker's network (set "
            "SUREHAND_AGENT_NETWORK=host to say so, or install bubblewrap)",
            setting="SUREHAND_AGENT_NETWORK",
        )
    return sandbox


@functools.cache
def _resolve(mode: str, network: str) -> Sandbox:
    if mode == NONE:
        return Sandbox(NONE, "SUREHAND_AGENT_SANDBOX=none")
    binary = shutil.which(BWRAP)
    problem = _bwrap_problem(binary, network)
    if problem is None:
        assert binary is not None
        why = "SUREHAND_AGENT_SANDBOX=bwrap" if mode == BWRAP else "bubblewrap works here"
        return Sandbox(BWRAP, why, network, binary)
    raise ConfigError(
        f"SUREHAND_AGENT_SANDBOX={mode}, but {problem}: command agents would run unconfined "
        "(seeing the host's processes, files and network as the worker's user), so they are "
        "refused. Install bubblewrap (Debian: apt-get install bubblewrap) and allow user "
        "namespaces (a container: see compose/DEPLOYMENT.md), or set "
        "SUREHAND_AGENT_SANDBOX=none to run them without a sandbox (docs/agents/sandbox.md: "
        "What an agent can reach)",
        setting="SUREHAND_AGENT_SANDBOX",
    )


def _bwrap_problem(binary: str | None, network: str) -> str | None:
    """Why bwrap cannot confine a program here (None: it can): it is run once, as sessions
    would run it."""
    if binary is None:
        return "bwrap is not installed"
    trial = [binary, *_namespaces(network), "--ro-bind", "/", "/", "--proc", "/proc", "true"]
    try:
        done = subprocess.run(trial, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap did not run ({error})"
    if done.returncode != 0:
        return f"bwrap fails here: {done.stderr.decode(errors='replace').strip()[:300]}"
    return None
