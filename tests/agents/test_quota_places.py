"""What the quota watch counts for a session is the session's own, and nothing else: its
sandbox's tmpfs files only through a process inside its view (never the host's file systems,
which a process of bubblewrap still sees while it sets the sandbox up), never through a pid
that names another process, never past a link, and only places strictly inside the work
directory.

The flake these are for: a round that came while bubblewrap set a sandbox up counted the
host's ``/tmp`` and ``/run`` through ``statvfs`` (every file of the host's disk, 1.3 million)
and interrupted a trivial session with ``quota_exceeded``."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from surehand.agents import quotas, sandbox
from surehand.agents.groups import AgentGroup, start_time
from surehand.agents.quotas import Quota, Watched
from tests.agent_procs import require_proc
from tests.procs import wait_until
from tests.skips import missing

MIB = 1024 * 1024


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process in the worker's own view (no sandbox around it)."""
    require_proc()
    process = subprocess.Popen(["sleep", "300"])
    yield process
    process.kill()
    process.wait()


def watched_through(root: Path, pid: int, files: int = 10) -> Watched:
    root.mkdir(exist_ok=True)
    watched = Watched("a1", (root,), Quota(MIB, files), threading.Event(), lambda: pid)
    watched.baseline = quotas.measure([root])  # as before its program starts: no sandbox yet
    return watched


def test_a_process_in_the_workers_own_view_shows_no_sandbox_files(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """Its /tmp and /run are the host's: counted, they were every file of the host's disk."""
    watched = watched_through(tmp_path / "session", sleeper.pid)

    watched.check()

    assert watched.usage().files == 1  # the session directory, and nothing of the host's
    assert watched.exceeded is None


def test_a_process_in_a_mount_namespace_not_yet_pivoted_into_its_view_shows_no_sandbox_files(
    tmp_path: Path,
) -> None:
    """bubblewrap's second process while it sets the sandbox up: namespaces of its own, but
    the host's root (and so the host's /tmp) until it pivots into the view."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-Urm", "true"], check=False).returncode:
        missing("unshare -Urm (unprivileged user and mount namespaces)")
    process = subprocess.Popen([unshare, "-Urm", "sleep", "300"])
    try:
        wait_until(lambda: _in_own_mount_namespace(process.pid), timeout=30, what="unshare")
        watched = watched_through(tmp_path / "session", process.pid)

        watched.check()

        assert watched.usage().files == 1
        assert watched.exceeded is None
    finally:
        process.kill()
        process.wait()


def _in_own_mount_namespace(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False


def test_a_real_sandboxs_own_tmpfs_files_count(tmp_path: Path) -> None:
    binary = shutil.which("bwrap")
    if binary is None:
        missing("bwrap (bubblewrap)")
    require_proc()
    session = tmp_path / "session"
    session.mkdir()
    box = sandbox.Sandbox(sandbox.BWRAP, "test", binary=binary)
    program = "for i in $(seq 50); do : > /tmp/f$i; done; : > ready; sleep 300"
    argv = box.wrap(["sh", "-c", program], session_dir=session, hidden=(), binds=())
    with open(os.devnull, "wb") as quiet:
        group = AgentGroup.start(
            argv,
            cwd=session,
            env={"PATH": os.environ["PATH"]},
            stdout=quiet,
            stderr=quiet,
            trampoline=["--sandboxed"],
        )
    try:
        wait_until((session / "ready").exists, timeout=30, what="the sandboxed program")
        look = functools.partial(quotas.sandbox_pid, group.pgid, group.started)
        watched = Watched("a1", (), Quota(MIB, 10), threading.Event(), look)

        watched.check()

        # Its 50 files and the roots of its /tmp, /dev/shm and /run; nothing of the host's.
        assert 53 <= watched.usage().files < 100
        assert watched.exceeded is not None
        assert "SUREHAND_AGENT_DISK_FILES" in watched.exceeded
    finally:
        group.stop(grace=0.1)


def test_a_leaders_pid_that_names_another_process_leads_to_no_sandbox(tmp_path: Path) -> None:
    """The leader's pid is free once it is reaped (the session's last check comes after): a
    process started at another time under it is someone else's, maybe another session's."""
    require_proc()
    grandchild = "sh -c 'sleep 300; :'; :"  # the trailing commands keep each shell from exec'ing
    leader = subprocess.Popen(["sh", "-c", grandchild], start_new_session=True)
    try:
        started = start_time(leader.pid)
        wait_until(lambda: quotas.sandbox_pid(leader.pid) is not None, timeout=30, what="sh")

        assert quotas.sandbox_pid(leader.pid, started) == quotas.sandbox_pid(leader.pid)
        assert quotas.sandbox_pid(leader.pid, f"{started}0") is None
    finally:
        os.killpg(leader.pid, signal.SIGKILL)  # its group: the leader and what it started
        leader.wait()


def test_tmpfs_files_never_follow_a_link_nor_count_a_directory_of_the_roots_file_system(
    tmp_path: Path,
) -> None:
    """A link is resolved in the worker's view, not the sandbox's: followed, ``/tmp ->
    /dev`` counted the host's /dev; and a plain directory is on the root's file system."""
    dev = os.stat("/dev").st_dev
    if dev in {os.stat(path).st_dev for path in ("/", "/tmp", "/dev/shm", "/run", tmp_path)}:
        pytest.skip("/dev is no file system of its own here")
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    (root / "tmp").symlink_to("/dev")
    (root / "dev" / "shm").symlink_to("/dev")
    (root / "run").mkdir()
    (root / "run" / "file").touch()
    assert os.statvfs(root / "tmp").f_files - os.statvfs(root / "tmp").f_ffree > 0

    descriptor = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        assert quotas.tmpfs_files(descriptor) == 0
    finally:
        os.close(descriptor)


def test_only_places_strictly_inside_the_work_directory_are_walked(tmp_path: Path) -> None:
    work = tmp_path / "sessions"
    (work / "a1").mkdir(parents=True)
    (work / "other").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (work / "link").symlink_to(tmp_path / "elsewhere")
    places = [work, work / "a1", work / ".." / "elsewhere", work / "link", work / "a1" / ".."]

    watched = quotas.watched_session("a1", places, within=work, quota=Quota(MIB, 10))

    assert watched.roots == (work / "a1",)
