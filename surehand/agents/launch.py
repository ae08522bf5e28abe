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
per-process limits; core dumps are off. The sandbox's tmpfs mounts are sized
(``SUREHAND_AGENT_TMPFS_MIB``), and the disk a session adds is watched
(:mod:`surehand.agents.quotas`).

An agent user (``SUREHAND_AGENT_USER``) runs bubblewrap itself, so it must reach every path its
sandbox binds: the worker checks them all at start (:func:`reached_paths`) and refuses to start,
naming each path, the directory that blocks it and the setting that put it there.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from surehand.agents import cgroups, environment, sandbox, view
from surehand.agents.cgroups import Limits, SessionCgroup
from surehand.agents.gateway import SessionNet
from surehand.agents.network import AgentNetwork
from surehand.agents.quotas import Quota, free_space
from surehand.agents.sandbox import Sandbox
from surehand.agents.workspaces import Workspaces
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
    tmpfs_bytes: int
    quota: Quota
    free_floor: tuple[Path, int, int]  # the work directory, and the MiB and files kept free
    no_cgroup: str | None = None
    passed: list[str] = field(default_factory=list)

    @classmethod
    def from_settings(cls, settings: Settings, program: Sequence[str] = ()) -> Confinement:
        """Resolve the settings (ConfigError for a bad one) and find out what this host
        allows: the sandbox mode, and whether session cgroups can be made. With an agent
        user, ConfigError unless it can reach everything its sandbox binds (``program``: the
        command line, whose own files are bound too)."""
        environment.operator_names(settings.agent_env)  # a surehand name is refused at start
        limits = Limits(settings.agent_memory_mib * MIB, settings.agent_max_processes)
        owner = agent_owner(settings.agent_user)
        if owner is not None:
            prepare_work_dir(settings.work_dir.resolve())
            require_reachable(owner, reached_paths(settings, program))
        no_cgroup = cgroups.availability(limits)
        chosen = sandbox.sandbox_for(settings)
        return cls(
            sandbox=chosen,
            limits=limits,
            rlimits=_rlimits(settings, owner, cgroup=no_cgroup is None),
            owner=owner,
            hidden=tuple(view.hidden_paths(settings)),
            binds=tuple(view.bound_paths(settings)),
            env_setting=settings.agent_env,
            net=AgentNetwork.from_settings(settings, chosen, owner),
            no_cgroup=no_cgroup,
            passed=environment.received_names(settings.agent_env),
            tmpfs_bytes=settings.agent_tmpfs_mib * MIB,
            quota=Quota.from_settings(settings),
            free_floor=(
                settings.work_dir,
                settings.work_dir_min_free_mib,
                settings.work_dir_min_free_files,
            ),
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
            f"view {self._describe_view()}",
            f"network {self.net.describe()}",
            f"limits {cgroup}; per process: {caps}",
            f"disk {self._describe_disk()}",
            f"user {user}",
            f"environment {', '.join(self.passed) or 'nothing'} from the worker, besides the "
            "session's own SUREHAND_* variables and HOME",
        ]

    def _describe_view(self) -> str:
        if self.sandbox.mode != sandbox.BWRAP:
            return "the host's files, as the agent's user may read and write them (no sandbox)"
        binds = "".join(f", {path}{'' if rw else ' (read-only)'}" for path, rw in self.binds)
        return (
            "the system's /usr, part of /etc, surehand's Python, the program's own files and "
            f"the session directory{binds}; /tmp and /dev/shm of {self.tmpfs_bytes // MIB} "
            "MiB each; no home directory"
        )

    def _describe_disk(self) -> str:
        work_dir, mib, files = self.free_floor
        free = free_space(work_dir)
        now = f" (now {free[0] // MIB} MiB and {free[1]} files)" if free else ""
        return (
            f"a session may add {self.quota.describe()} (checked while it runs); no session "
            f"starts while {work_dir} has less than {mib} MiB or {files} files free{now}"
        )

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
            program_mounts=view.program_mounts(program[0], env.get("PATH", "")),
            tmpfs_bytes=self.tmpfs_bytes,
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


def prepare_work_dir(work_dir: Path) -> None:
    """Make the work directory 0711: an agent user reaches its own session there, and lists
    nothing (its parents are checked by :func:`require_reachable`)."""
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    work_dir.chmod(0o711)


def reached_paths(settings: Settings, program: Sequence[str] = ()) -> list[tuple[Path, str]]:
    """Every host path an agent user's sandbox opens (or, without one, its program runs
    from), each with the setting that puts it there: the session directories, surehand's
    Python and package, ``SUREHAND_AGENT_BIND``, the workspaces and the program's own files."""
    found = [(settings.work_dir.resolve(), "SUREHAND_WORK_DIR")]
    found += [(path, "SUREHAND_AGENT_USER") for path in view.runtime_paths()]
    found += [(path, "SUREHAND_AGENT_BIND") for path, _ in view.bound_paths(settings)]
    workspaces = Workspaces.parse(settings.agent_workspace)
    specs = [workspaces.default, *workspaces.by_role.values()]
    found += [(spec.path, "SUREHAND_AGENT_WORKSPACE") for spec in specs if spec is not None]
    if program:
        search = environment.agent_environment({}, home=Path("/"), setting="")["PATH"]
        mounts = view.program_mounts(program[0], search)
        found += [(path, "SUREHAND_COMMAND_AGENT") for path in view.bind_sources(mounts)]
    return found


def require_reachable(owner: tuple[int, int], paths: Sequence[tuple[Path, str]]) -> None:
    """The agent user can reach each of ``paths`` (every directory down to it, and a
    directory itself, let it through); ConfigError naming each path it cannot reach, every
    directory on the way that blocks it and the setting that put it there."""
    blocked = [
        (path, directories, setting)
        for path, setting in paths
        if (directories := _blocking(path, owner))
    ]
    if not blocked:
        return
    lines = "; ".join(
        f"{path} ({setting}): "
        + ", ".join(f"{directory} does not let it through" for directory in directories)
        for path, directories, setting in blocked
    )
    first = blocked[0][1][0]
    raise ConfigError(
        f"SUREHAND_AGENT_USER={owner[0]} cannot reach what its sessions need: {lines}. Let "
        f"it through (chmod o+x {first}), or put these where it can reach them (a virtualenv "
        "and the agent CLIs under /opt, SUREHAND_WORK_DIR under /var/lib)",
        setting=blocked[0][2],
    )


def _blocking(path: Path, owner: tuple[int, int]) -> list[Path]:
    """The directories from ``/`` down to ``path`` that ``owner`` cannot search."""
    if owner[0] == 0:
        return []  # root searches any directory
    chain = [*reversed(path.parents), path] if path.is_dir() else [*reversed(path.parents)]
    found: list[Path] = []
    for directory in chain:
        try:
            info = directory.stat()
        except OSError:
            return [*found, directory]
        if not _searchable(info.st_mode, info.st_uid, info.st_gid, owner):
            found.append(directory)
    return found


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
