"""What a sandboxed agent program sees of the host's files: an allowlist, never ``/``.

The sandbox's root is an empty file system of bubblewrap's. Into it go, read-only:

- the system's programs and libraries (:data:`SYSTEM`: ``/usr``, and ``/bin``, ``/sbin`` and
  ``/lib*`` as the links or directories the host has);
- of ``/etc``, what programs need to run, resolve names and check certificates (:data:`ETC`):
  never ``shadow``, ``gshadow``, ``sudoers``, ``ssh/`` (host keys), ``ssl/private``, ``npmrc``
  or ``pip.conf`` (registry tokens);
- the Python surehand runs on (virtualenv, base installation) and surehand's own package: the
  portal, the hooks and ``surehand effect`` run on it inside (:func:`runtime_paths`);
- the program, found on ``PATH`` as the sandbox finds it, with the links that lead to it, and
  for a program of an npm package the ``node_modules`` tree it lives in; a script's
  interpreter the same way (:func:`program_mounts`);

then the session's own: its directory (read-write), its workspace, the socket of its session
server, and the operator's ``SUREHAND_AGENT_BIND``. ``/tmp`` and ``/dev/shm`` are tmpfs of
``SUREHAND_AGENT_TMPFS_MIB`` each and ``/run`` one of 1 MiB (memory that ``RLIMIT_AS`` does
not count, so each is sized); ``/dev`` and ``/proc`` are the sandbox's own; the root and
``/dev`` are read-only. Nothing else exists in it: not ``/root``, ``/home``, the worker user's
home, ``/var``, ``/opt``, nor the checkout surehand runs from (its ``.git``, its ``.env``).

A hidden path (the surehand home, the session directories, the SQLite store,
``SUREHAND_AGENT_HIDE``) matters where it lies inside something bound: an empty read-only
tmpfs (a directory) or ``/dev/null`` (a file) covers it. The most specific path wins: mounts
go outer first, so a hidden path stays hidden inside a bound one, a path bound inside a hidden
one is seen, and of a path both bound and hidden, the hiding comes last.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from surehand.config import Settings
from surehand.errors import ConfigError
from surehand.store.engine import sqlite_file

PACKAGE = Path(__file__).resolve().parents[1]  # surehand/, whose files run in the sandbox
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = (
    # who is who, and how names resolve
    "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "hostname", "resolv.conf",
    "gai.conf", "networks", "protocols", "services", "shells",
    # the dynamic linker, alternatives, time, locale, terminals
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "timezone",
    "locale.alias", "terminfo", "inputrc", "mime.types", "magic", "magic.mime", "fonts",
    "os-release", "debian_version", "lsb-release", "python3", "python3.11",
    # certificates (Debian, then Red Hat layouts); never ssl/private
    "ssl/certs", "ssl/openssl.cnf", "ca-certificates", "pki/tls/certs", "pki/ca-trust",
    "crypto-policies",
)  # fmt: skip
SMALL_TMPFS = ("/run",)
SMALL_TMPFS_BYTES = 1024 * 1024
_SQLITE_SIDES = ("", "-wal", "-shm", "-journal")
_NODE_MODULES = "node_modules"

RO, RW, HIDE, LINK, TMPFS = "ro", "rw", "hide", "link", "tmpfs"
_ORDER = {TMPFS: 0, RW: 1, RO: 1, LINK: 2, HIDE: 3}


@dataclass(frozen=True)
class Mount:
    """One entry of the view: a bind (``ro``/``rw``), a hiding, a link or a sized tmpfs."""

    path: Path
    kind: str
    target: str = ""  # a link's target
    size: int = 0  # a tmpfs's bytes

    def args(self) -> list[str]:
        """bubblewrap's arguments for it."""
        where = str(self.path)
        if self.kind in (RO, RW):
            return ["--bind" if self.kind == RW else "--ro-bind", where, where]
        if self.kind == LINK:
            return ["--symlink", self.target, where]
        if self.kind == TMPFS:
            return ["--perms", "1777", "--size", str(self.size), "--tmpfs", where]
        if self.path.is_dir():  # HIDE: an empty tmpfs, made read-only at the end
            return ["--tmpfs", where]
        return ["--ro-bind", "/dev/null", where] if self.path.exists() else []


def arguments(
    session_dir: Path,
    hidden: Sequence[Path],
    binds: Sequence[tuple[Path, bool]],
    *,
    program: Sequence[Mount] = (),
    tmpfs_bytes: int,
) -> list[str]:
    """bubblewrap's arguments for one session's view (see the module docstring): ``binds``
    are (path, writable), ``program`` what :func:`program_mounts` found for its program."""
    mounts = [
        *system_mounts(),
        *(Mount(path, TMPFS, size=tmpfs_bytes) for path in (Path("/tmp"), Path("/dev/shm"))),
        *(Mount(Path(path), TMPFS, size=SMALL_TMPFS_BYTES) for path in SMALL_TMPFS),
        *runtime_mounts(),
        *program,
        *(Mount(path, RW if writable else RO) for path, writable in binds),
        Mount(session_dir, RW),
    ]
    mounts += [Mount(path, HIDE) for path in hidden if _inside_any(path, mounts)]
    kept = sorted(_without_repeats(mounts), key=lambda m: (len(m.path.parts), _ORDER[m.kind]))
    args = ["--dev", "/dev", "--proc", "/proc"]
    args += [arg for mount in kept for arg in mount.args()]
    # Read-only last: the mount points inside are made by then, and a remount is not recursive.
    hidden_dirs = [m.path for m in kept if m.kind == HIDE and m.path.is_dir()]
    for path in [*hidden_dirs, Path("/dev"), Path("/")]:
        args += ["--remount-ro", str(path)]
    return args


@functools.cache
def system_mounts() -> tuple[Mount, ...]:
    """``/usr`` and its companions as the host has them, and the allowlisted part of ``/etc``
    (looked at once per process)."""
    found = []
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            found.append(Mount(path, LINK, target=os.readlink(path)))
        elif path.is_dir():
            found.append(Mount(path, RO))
    etc = (Path("/etc", name) for name in ETC)
    return (*found, *(Mount(path, RO) for path in etc if path.exists()))


def runtime_paths() -> list[Path]:
    """Where the Python surehand runs on lives (virtualenv, base installation, the
    interpreter's directory) and surehand's package, resolved; without the ones in ``/usr``."""
    return list(_runtime(sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable)[0])


def runtime_mounts() -> tuple[Mount, ...]:
    """The runtime bound read-only, and a link where a prefix is named through one."""
    return _runtime(sys.prefix, sys.base_prefix, sys.exec_prefix, sys.executable)[1]


@functools.cache
def _runtime(*names: str) -> tuple[tuple[Path, ...], tuple[Mount, ...]]:
    """(paths, mounts) of the runtime that ``names`` (prefixes, executable) locate: looked
    at once per process and runtime."""
    prefix, base_prefix, exec_prefix, executable = map(Path, names)
    wanted = [prefix, base_prefix, exec_prefix, executable.resolve().parent, PACKAGE]
    found = list(dict.fromkeys(path.resolve() for path in wanted if path.exists()))
    paths = tuple(
        path
        for path in found
        if not _in_system(path) and not any(p != path and _under(path, p) for p in found)
    )
    mounts = [Mount(path, RO) for path in paths]
    for named in {prefix, base_prefix}:
        if named.resolve() != named and named.is_absolute() and not _in_system(named):
            mounts.append(Mount(named, LINK, target=str(named.resolve())))
    return paths, tuple(mounts)


def program_mounts(name: str, search_path: str, *, depth: int = 2) -> list[Mount]:
    """What running ``name`` needs in the view: its file (found on ``search_path`` as
    ``execvp`` finds it), a link for each link that leads to it, the ``node_modules`` tree it
    lies in, and the same for a script's interpreter (``#!``, ``/usr/bin/env NAME`` too).
    Nothing for what the system directories hold already."""
    found = _which(name, search_path)
    if found is None or depth == 0:
        return []
    mounts = [Mount(link, LINK, target=target) for link, target in _links(found)]
    real = found.resolve()
    tree = _node_modules(real)
    mounts.append(Mount(tree or real, RO))
    interpreter = _interpreter(real)
    if interpreter is not None:
        mounts += program_mounts(interpreter, search_path, depth=depth - 1)
    return [m for m in mounts if not _in_system(m.path)]


def bind_sources(mounts: Sequence[Mount]) -> list[Path]:
    """The host paths among ``mounts`` that bubblewrap opens (binds; links make nothing)."""
    return [m.path for m in mounts if m.kind in (RO, RW)]


def _which(name: str, search_path: str) -> Path | None:
    if "/" in name:
        path = Path(name)
        return path if path.is_absolute() and path.is_file() else None
    for directory in search_path.split(os.pathsep):
        candidate = Path(directory or ".", name)
        if directory and candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def _links(path: Path) -> Iterator[tuple[Path, str]]:
    """(link, its target) for each link from ``path`` to the file it names."""
    seen: set[Path] = set()
    while path.is_symlink() and path not in seen:
        seen.add(path)
        target = os.readlink(path)
        yield path, target
        path = Path(os.path.normpath(path.parent.resolve() / target))


def _node_modules(path: Path) -> Path | None:
    """The outermost ``node_modules`` directory above ``path`` (its package's dependencies
    are found anywhere up to there)."""
    parts = path.parts
    if _NODE_MODULES not in parts:
        return None
    return Path(*parts[: parts.index(_NODE_MODULES) + 1])


def _interpreter(path: Path) -> str | None:
    """The program a script's ``#!`` line runs (the NAME of ``/usr/bin/env NAME``)."""
    try:
        with path.open("rb") as file:
            head = file.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if words and Path(words[0]).name == "env":
        words = [word for word in words[1:] if not word.startswith("-")]
    return words[0] if words else None


def _in_system(path: Path) -> bool:
    return any(_under(path, system) for system in _system_dirs())


@functools.cache
def _system_dirs() -> tuple[Path, ...]:
    """The system directories, as named and as resolved (``/bin`` and ``/usr/bin``)."""
    named = [Path(name) for name in SYSTEM]
    return tuple(dict.fromkeys([*named, *(path.resolve() for path in named)]))


def _under(path: Path, directory: Path) -> bool:
    """``path.is_relative_to(directory)``, by parts (pathlib's parses both again each call)."""
    parts, outer = path.parts, directory.parts
    return len(parts) >= len(outer) and parts[: len(outer)] == outer


def _inside_any(path: Path, mounts: Sequence[Mount]) -> bool:
    binds = {m.path for m in mounts if m.kind in (RO, RW)}
    return path in binds or any(directory in binds for directory in path.parents)


def _without_repeats(mounts: Sequence[Mount]) -> list[Mount]:
    """``mounts`` without exact repeats, and without a read-only bind or a link that a bind
    around it shows already (nothing hidden between): a read-only bind for a read-only one,
    any for a link (bubblewrap would make the link again in the host's directory)."""
    unique = list(dict.fromkeys(mounts))
    read_only = {m.path for m in unique if m.kind == RO}
    any_bind = read_only | {m.path for m in unique if m.kind == RW}
    hides = {m.path for m in unique if m.kind == HIDE}
    kept = []
    for mount in unique:
        showing = any_bind if mount.kind == LINK else read_only if mount.kind == RO else set()
        if not (showing and _shown(mount.path, showing, hides)):
            kept.append(mount)
    return kept


def _shown(path: Path, showing: set[Path], hides: set[Path]) -> bool:
    """Whether the nearest of ``path``'s directories that is bound or hidden is bound."""
    for directory in path.parents:
        if directory in hides:
            return False
        if directory in showing:
            return True
    return False


def hidden_paths(settings: Settings) -> list[Path]:
    """What every session must not see even inside a bound path: the surehand home, the
    session directories (other sessions and the group records), the SQLite store and what
    ``SUREHAND_AGENT_HIDE`` lists."""
    paths = [settings.home.resolve(), settings.work_dir.resolve()]
    database = sqlite_file(settings.resolved_database_url())
    if database is not None:
        paths += [Path(f"{database.resolve()}{side}") for side in _SQLITE_SIDES]
    paths += [Path(part).resolve() for part in _items(settings.agent_hide)]
    return paths


def bound_paths(settings: Settings) -> list[tuple[Path, bool]]:
    """``SUREHAND_AGENT_BIND``: (path, writable) for ``PATH`` and ``PATH:ro`` entries."""
    binds = []
    for item in _items(settings.agent_bind):
        path, _, mode = item.rpartition(":") if item.endswith((":ro", ":rw")) else (item, "", "rw")
        if not Path(path).is_absolute() or not Path(path).exists():
            raise ConfigError(
                f"SUREHAND_AGENT_BIND entry {item!r}: bind an absolute path that exists",
                setting="SUREHAND_AGENT_BIND",
            )
        binds.append((Path(path).resolve(), mode != "ro"))
    return binds


def _items(setting: str) -> list[str]:
    return [part.strip() for part in setting.split(",") if part.strip()]
