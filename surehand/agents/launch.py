"""How every command agent's program is started here: sandbox, limits, user and environment.

:class:`Confinement` is read from the settings once per command agent and applied to each
session's program (:meth:`Confinement.launch`): the command line (the program inside the
sandbox of :mod:`surehand.agents.sandbox`, its network's portal first where it has a network of
its own: :mod:`surehand.agents.network`), the trampoline's options (resource limits, the user to
run as, subreaper), the session's cgroup (a cap on its processes and memory together,
:mod:`surehand.agents.cgroups`) and the environment (:mod:`surehand.agents.environment`, with
the egress proxy's variables).

Limits: the session cgroup caps processes and memory where it can be made; where it cannot,
memory falls back to ``RLIMIT_AS`` per process, and processes to ``RLIMIT_NPROC`` for a
non-root agent user (it never binds uid 0). CPU time, file size and open files are always
per-process limits; core dumps are off.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from surehand.agents import cgroups, environment, sandbox
from surehand.agents.cgroups import Limits, SessionCgroup
from surehand.agents.gateway import SessionNet
from surehand.agents.network import AgentNetwork
from surehand.agents.sandbox import Sandbox
from surehand.config import Settings
from surehand.errors import ConfigError, SandboxError

MIB = 1024 * 1024


@dataclass(frozen=True)
class Launch:
    """One session's program, ready for :meth:`surehand.agents.groups.AgentGroup.start`."""

    argv: list[str]
    trampoline: list[str]
    env: dict[str, str]
    cgroup: SessionCgroup | None


@dataclass(frozen=True)
class Confinement:
    """What confines every command agent's program in this process."""

    sandbox: Sandbox
    limits: Limits
    rlimits: tuple[tuple[str, int], ...]
    owner: tuple[int, int] | None
    hidden: tuple[Path, ...]
    binds: tuple[tuple[Path, bool], ...]
    env_setting: str
    net: AgentNetwork  # how programs reach out of their sandbox
    no_cgroup: str | None = None
    passed: list[str] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: Settings) -> Confinement:
        """Resolve the settings (ConfigError for a bad one) and find out what this host
        allows: the sandbox mode, and whether session cgroups can be made."""
        environment.operator_names(settings.agent_env)  # a surehand name is refused at start
        limits = Limits(settings.agent_memory_mib * MIB, settings.agent_max_processes)
        owner = agent_owner(settings.agent_user)
        if owner is not None:
            require_reachable(settings.work_dir.resolve(), owner)
        no_cgroup = cgroups.availability(limits)
        chosen = sandbox.sandbox_for(settings)
        return cls(
            sandbox=chosen,
            limits=limits,
            rlimits=_rlimits(settings, owner, cgroup=no_cgroup is None),
            owner=owner,
            hidden=tuple(sandbox.hidden_paths(settings)),
            binds=tuple(sandbox.bound_paths(settings)),
            env_setting=settings.agent_env,
            net=AgentNetwork.from_settings(settings, chosen, owner),
            no_cgroup=no_cgroup,
            passed=environment.received_names(settings.agent_env),
        )

    def describe(self) -> list[str]:
        """What an agent program gets here, one line each (worker start, ``surehand check``)."""
        caps = ", ".join(f"{name} {value}" for name, value in self.rlimits)
        cgroup = (
            f"session cgroup: at most {self.limits.max_processes} processes and "
            f"{self.limits.memory_bytes // MIB} MiB together"
            if self.no_cgroup is None
            else f"no session cgroup: {self.no_cgroup}"
        )
        user = f"uid {self.owner[0]}" if self.owner else f"the worker's (uid {os.getuid()})"
        return [
            f"sandbox {self.sandbox.describe()}",
            f"network {self.net.describe()}",
            f"limits {cgroup}; per process: {caps}",
            f"user {user}",
            f"environment {', '.join(self.passed) or 'nothing'} from the worker, besides the "
            "session's own SUREHAND_* variables and HOME",
        ]

    def launch(
        self,
        program: Sequence[str],
        *,
        name: str,
        session_dir: Path,
        session_env: Mapping[str, str],
        network: SessionNet | None = None,
        program_env: Mapping[str, str] | None = None,
        workspace: Sequence[tuple[Path, bool]] = (),
    ) -> Launch:
        """Confine ``program`` for the session ``name`` (its attempt id) in ``session_dir``;
        ``network``: its ways out of its own network namespace (:meth:`AgentNetwork.session`);
        ``program_env``: what a preset's CLI needs in its environment; ``workspace``: what the
        session's workspace needs bound, as (path, writable)."""
        program_env = {**(program_env or {}), **(network.env if network else {})}
        env = environment.agent_environment(
            session_env, home=session_dir / "home", setting=self.env_setting, program=program_env
        )
        cgroup = None
        if self.no_cgroup is None:
            cgroup = SessionCgroup.create(name, self.limits)
            if cgroup is None:
                raise SandboxError(f"could not make the cgroup of session {name}; nothing ran")
        argv = self.sandbox.wrap(
            program,
            session_dir=session_dir,
            hidden=self.hidden,
            binds=[*self.binds, *workspace, *self.net.binds(network)],
            portal=self.net.portal(network),
        )
        return Launch(argv, self._trampoline(), env, cgroup)

    def _trampoline(self) -> list[str]:
        options = [arg for name, value in self.rlimits for arg in ("--rlimit", f"{name}={value}")]
        if self.owner is not None:
            options += ["--user", f"{self.owner[0]}:{self.owner[1]}"]
        confined = self.sandbox.mode == sandbox.BWRAP
        return [*options, "--sandboxed" if confined else "--subreaper"]


def _rlimits(
    settings: Settings, owner: tuple[int, int] | None, *, cgroup: bool
) -> tuple[tuple[str, int], ...]:
    limits = [
        ("cpu", settings.agent_cpu_seconds),
        ("fsize", settings.agent_file_size_mib * MIB),
        ("nofile", settings.agent_open_files),
        ("core", 0),
    ]
    if not cgroup:
        limits.append(("as", settings.agent_memory_mib * MIB))
        if owner is not None and owner[0] != 0:
            limits.append(("nproc", settings.agent_max_processes))
    return tuple(limits)


def agent_owner(setting: str) -> tuple[int, int] | None:
    """``SUREHAND_AGENT_USER`` as (uid, gid); None for the worker's own user."""
    if not setting.strip():
        return None
    uid_text, _, gid_text = setting.strip().partition(":")
    try:
        if uid_text.isdigit():
            uid = int(uid_text)
            gid = int(gid_text) if gid_text else _gid_of(uid)
        else:
            entry = pwd.getpwnam(uid_text)
            uid, gid = entry.pw_uid, int(gid_text) if gid_text else entry.pw_gid
    except (KeyError, ValueError):
        raise ConfigError(
            f"SUREHAND_AGENT_USER={setting!r} names no user here; give a user name or uid[:gid]",
            setting="SUREHAND_AGENT_USER",
        ) from None
    if os.getuid() not in (0, uid):
        raise ConfigError(
            f"SUREHAND_AGENT_USER={setting!r}: only a root worker can run agents as another "
            "user; run the worker as root or leave it empty",
            setting="SUREHAND_AGENT_USER",
        )
    return uid, gid


def require_reachable(work_dir: Path, owner: tuple[int, int]) -> None:
    """The agent user can reach its session directories under ``work_dir``: every directory
    above them lets it through (search permission); ConfigError naming the one that does not.
    ``work_dir`` itself becomes 0711: reachable, not listable."""
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    work_dir.chmod(0o711)
    for directory in [work_dir, *work_dir.parents]:
        info = directory.stat()
        if not _searchable(info.st_mode, info.st_uid, info.st_gid, owner):
            raise ConfigError(
                f"SUREHAND_AGENT_USER={owner[0]} cannot reach the session directories: "
                f"{directory} does not let it through (chmod o+x {directory}, or set "
                "SUREHAND_WORK_DIR under a directory it can reach)",
                setting="SUREHAND_WORK_DIR",
            )


def _searchable(mode: int, uid: int, gid: int, owner: tuple[int, int]) -> bool:
    if uid == owner[0]:
        return bool(mode & 0o100)
    if gid == owner[1]:
        return bool(mode & 0o010)
    return bool(mode & 0o001)


def _gid_of(uid: int) -> int:
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid
