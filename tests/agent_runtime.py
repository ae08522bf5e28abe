"""A surehand installation another user can reach, for the tests that run agents as one.

An agent user runs the sandbox itself, so it must reach everything the sandbox binds: the
Python surehand runs on and its package (the worker refuses to start otherwise). The tests' own
virtualenv may sit where it cannot (a clone under a 0700 directory, an interpreter under
``/root``), so :func:`reachable_runtime` builds one in a directory it can enter: a virtualenv
of this Python (or, where the agent user cannot reach its installation, of a copy of it, whose
interpreter finds its library beside itself), holding this virtualenv's packages and a copy of
surehand's package, with a ``surehand`` command. Files are hard links where the file system
allows (a second or two), copies elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from surehand.agents import view
from surehand.agents.launch import require_reachable
from surehand.errors import ConfigError
from surehand.store import Store
from tests.procs import RedisServer
from tests.session_helpers import attempts_of, reports_of
from tests.shared.workers import worker_env
from tests.skips import missing

AGENT = (65534, 65534)  # nobody
AGENT_USER = "65534:65534"
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def reachable_runtime(directory: Path) -> Path:
    """A runtime in ``directory`` (which the agent user must be able to enter, or not, as
    the test wants): its ``python``."""
    base = _reachable_base(directory)
    venv = directory / "venv"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / VERSION / "site-packages"
    for entry in Path(_site_packages()).iterdir():
        if entry.name.startswith(("__editable__", "surehand")):
            continue  # this checkout's editable install: a copy of the package instead
        _link_tree(entry, site / entry.name)
    shutil.copytree(view.PACKAGE, site / "surehand", ignore=shutil.ignore_patterns("__pycache__"))
    python = venv / "bin" / "python"
    command = venv / "bin" / "surehand"
    command.write_text(f"#!{python}\nfrom surehand.cli import main\nmain()\n")
    command.chmod(0o755)
    return python


def runtime_home() -> Path:
    """A new directory under ``/var/tmp`` that every user may enter (not list)."""
    home = Path(tempfile.mkdtemp(prefix="surehand-agent-runtime-", dir="/var/tmp"))
    home.chmod(0o711)
    return home


def _reachable_base(directory: Path) -> Path:
    """This Python's interpreter, or a copy of its installation (without its own
    site-packages) in ``directory`` where the agent user cannot reach it."""
    base = Path(sys.base_prefix).resolve()
    if _reachable(base):
        return base / "bin" / VERSION
    copy = directory / "base"
    shutil.copytree(
        base,
        copy,
        symlinks=True,
        copy_function=_link_or_copy,
        ignore=lambda where, names: ["site-packages"] if where.endswith(VERSION) else [],
    )
    interpreter = copy / "bin" / VERSION
    _library_beside(interpreter, base / "lib")
    return interpreter


def _library_beside(interpreter: Path, library: Path) -> None:
    """Make ``interpreter`` look for its shared library in ``../lib`` of its own (a build
    whose run path names ``library``, as pyenv's does, would load the original, which the
    agent user cannot reach): the run path is rewritten in a copy of the file."""
    data = interpreter.read_bytes()
    old = str(library).encode() + b"\0"
    new = b"$ORIGIN/../lib\0"
    if old not in data or len(new) > len(old):
        return  # no such run path (a static build, a system Python): nothing to do
    interpreter.unlink()  # a hard link to the original: never written through
    interpreter.write_bytes(data.replace(old, new.ljust(len(old), b"\0")))
    interpreter.chmod(0o755)


def _reachable(prefix: Path) -> bool:
    try:
        require_reachable(AGENT, [(prefix, "")])
    except ConfigError:
        return False
    return True


def _site_packages() -> str:
    return next(path for path in sys.path if path.endswith("site-packages") and sys.prefix in path)


def _link_tree(source: Path, target: Path) -> None:
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(source), str(target))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:  # another file system
        shutil.copy2(source, target, follow_symlinks=False)


@pytest.fixture(scope="module")
def agent_runtime() -> Iterator[Path]:
    """A surehand installation uid 65534 can reach (its ``python``), in a directory it can
    enter, removed after the module's tests."""
    if os.getuid() != 0:
        missing("root (only a root worker can run agents as another user)")
    home = runtime_home()
    try:
        yield reachable_runtime(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def agent_user_env(
    store: Store, broker: RedisServer, tmp_path: Path, work_dir: Path, **extra: str
) -> dict[str, str]:
    """A worker running agents as uid 65534, with nothing bound that it cannot reach (the
    tests' own directories are root's alone; ``extra`` may bind what it can) and this
    checkout off its import path."""
    settings = {
        "SUREHAND_AGENTS": "DEV=command",
        "SUREHAND_AGENT_USER": AGENT_USER,
        "SUREHAND_WORK_DIR": str(work_dir),
        "SUREHAND_AGENT_BIND": "",
        "PYTHONPATH": "",
    }
    return worker_env(store, broker, tmp_path, **{**settings, **extra})


def surehand_of(python: Path) -> list[str]:
    """The ``surehand`` command of the runtime whose interpreter is ``python``."""
    return [str(python.parent / "surehand")]


def session_ended(store: Store, task_id: str) -> bool:
    """Whether the TASK's session has ended: a REPORT, or an attempt that ended with an error."""
    attempts = attempts_of(store, task_id)
    return bool(reports_of(store, task_id) or (attempts and attempts[-1].error))
