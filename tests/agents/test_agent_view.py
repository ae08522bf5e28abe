"""The sandbox's view is built from an allowlist (issue 29 item 5), and a session's disk use is
measured as the quota watch measures it (item 6): the parts testable in one process, real
bubblewrap included. Real workers and the hostile agent: tests/agents/test_hostile_view.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from surehand.agents import quota_watch, quotas, sandbox, view
from surehand.agents.launch import require_reachable
from surehand.agents.outputs import MAX_OUTPUT, keep_tail, open_private, tail_of
from surehand.agents.quotas import Quota, Usage, Watched
from surehand.config import Settings
from surehand.errors import ConfigError, NoSpaceForSessions
from surehand.model import Admission, AttemptCause, AttemptState
from tests.session_helpers import Harness, attempts_of, committed_task, reports_of
from tests.skips import missing

HOME = Path(os.path.expanduser("~"))
REPO = Path(__file__).resolve().parents[2]


def run_in_view(tmp_path: Path, code: str, **wrap: object) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` in a real bubblewrap sandbox of a session in ``tmp_path``."""
    binary = shutil.which("bwrap")
    if binary is None:
        missing("bwrap (bubblewrap)")
    session_dir = tmp_path / "session"
    session_dir.mkdir(exist_ok=True)
    box = sandbox.Sandbox(sandbox.BWRAP, "test", binary=binary)
    argv = box.wrap(
        [sys.executable, "-c", code],
        session_dir=session_dir,
        hidden=wrap.pop("hidden", []),  # type: ignore[arg-type]
        binds=wrap.pop("binds", []),  # type: ignore[arg-type]
        **wrap,  # type: ignore[arg-type]
    )
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_the_sandbox_shows_the_system_and_surehand_and_nothing_of_homes_or_the_checkout(
    tmp_path: Path,
) -> None:
    secrets = [str(HOME), "/home", str(REPO / ".git"), str(REPO / "tests"), "/etc/shadow"]
    needed = ["/etc/passwd", "/usr/bin/env", str(view.PACKAGE / "__init__.py")]
    code = (
        "import os, json, surehand\n"
        f"print(json.dumps({{p: os.listdir(p) if os.path.isdir(p) else os.path.exists(p) "
        f"for p in {secrets + needed!r}}}))"
    )

    done = run_in_view(tmp_path, code)

    assert done.returncode == 0, done.stderr
    seen = __import__("json").loads(done.stdout)
    assert [path for path in secrets if os.path.lexists(path)], "nothing to look for here"
    for path in secrets:  # absent, or only the mount points of what is bound below it
        assert seen[path] in (False, []) or set(seen[path]) <= {".pyenv", ".cache", ".local"}
    assert all(seen[path] is True for path in needed)


def test_the_root_dev_and_etc_are_read_only_and_the_tmpfs_mounts_are_sized(
    tmp_path: Path,
) -> None:
    code = (
        "import os\n"
        "for place in ('/', '/etc', '/dev', '/usr'):\n"
        "    try: open(os.path.join(place, 'x'), 'w'); print(place, 'written')\n"
        "    except OSError as e: print(place, e.strerror)\n"
        "for place in ('/tmp', '/dev/shm', '/run'):\n"
        "    s = os.statvfs(place); print(place, s.f_blocks * s.f_frsize // 1048576)\n"
    )

    done = run_in_view(tmp_path, code, tmpfs_bytes=8 * 1024 * 1024)

    assert done.stdout.splitlines() == [
        "/ Read-only file system",
        "/etc Read-only file system",
        "/dev Read-only file system",
        "/usr Read-only file system",
        "/tmp 8",
        "/dev/shm 8",
        "/run 1",
    ], done.stderr


def test_a_hidden_path_stays_hidden_inside_a_bound_one_and_a_bound_one_inside_it_is_seen(
    tmp_path: Path,
) -> None:
    shared = tmp_path / "shared"
    (shared / "store").mkdir(parents=True)
    (shared / "store" / "secret.txt").write_text("secret")
    (shared / "store" / "public").mkdir()
    (shared / "store" / "public" / "note.txt").write_text("note")
    code = (
        f"import os\nprint(sorted(os.listdir({str(shared / 'store')!r})))\n"
        f"print(open({str(shared / 'store' / 'public' / 'note.txt')!r}).read())"
    )

    done = run_in_view(
        tmp_path,
        code,
        hidden=[shared / "store"],
        binds=[(shared, True), (shared / "store" / "public", False)],
    )

    assert done.stdout.splitlines() == ["['public']", "note"], done.stderr


def test_a_program_of_an_npm_package_gets_its_node_modules_and_the_links_to_it(
    tmp_path: Path,
) -> None:
    modules = tmp_path / "home" / "lib" / "node_modules"
    package = modules / "@acme" / "agent"
    (package / "bin").mkdir(parents=True)
    (modules / "dependency").mkdir()
    script = package / "bin" / "agent.js"
    script.write_text("#!/usr/bin/env mynode\n")
    script.chmod(0o755)
    bin_dir = tmp_path / "home" / "bin"
    bin_dir.mkdir()
    (bin_dir / "agent").symlink_to(script)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "mynode").write_text("")
    (tools / "mynode").chmod(0o755)

    mounts = view.program_mounts("agent", f"{bin_dir}:{tools}:/usr/bin")

    assert mounts == [
        view.Mount(bin_dir / "agent", view.LINK, target=str(script)),
        view.Mount(modules, view.RO),  # the package and its dependencies
        view.Mount(tools / "mynode", view.RO),  # the script's interpreter
    ]
    assert view.program_mounts("sh", "/usr/bin:/bin") == []  # the system shows it already


def test_an_agent_user_that_cannot_reach_a_bound_path_is_told_each_directory_in_the_way() -> None:
    base = Path(tempfile.mkdtemp(dir="/var/tmp"))  # pytest's directories are root's alone
    try:
        base.chmod(0o755)
        outer = base / "outer"
        inner = outer / "inner"
        (inner / "venv").mkdir(parents=True, mode=0o755)
        outer.chmod(0o700)
        inner.chmod(0o700)

        with pytest.raises(ConfigError) as refused:
            require_reachable((65534, 65534), [(inner / "venv", "SUREHAND_AGENT_BIND")])
        require_reachable((65534, 65534), [(base, "SUREHAND_AGENT_BIND")])  # it may enter
    finally:
        shutil.rmtree(base)

    assert (
        f"{inner / 'venv'} (SUREHAND_AGENT_BIND): {outer} does not let it through, "
        f"{inner} does not let it through." in str(refused.value)
    )
    assert f"chmod o+x {outer}" in str(refused.value)
    assert refused.value.details["setting"] == "SUREHAND_AGENT_BIND"


# -- measuring a session's disk use -----------------------------------------------------------


def test_usage_counts_allocated_blocks_each_file_once_and_never_follows_a_link(
    tmp_path: Path,
) -> None:
    root = tmp_path / "session"
    root.mkdir()
    with (root / "sparse.bin").open("wb") as sparse:
        sparse.truncate(1024**3)  # a GiB that takes no disk
    (root / "data.bin").write_bytes(os.urandom(1024 * 1024))
    os.link(root / "data.bin", root / "again.bin")
    (root / "elsewhere").symlink_to("/usr")
    before = quotas.measure([root])

    (root / "more.bin").write_bytes(os.urandom(1024 * 1024))
    after = quotas.measure([root])

    assert before.files == 4  # the directory, two files (one of them by two names), the link
    assert 1024 * 1024 <= before.disk_bytes < 2 * 1024 * 1024
    assert 1024 * 1024 <= (after - before).disk_bytes < 1024 * 1024 + 64 * 1024


def test_a_watched_session_over_its_quota_is_marked_and_its_waiter_woken(tmp_path: Path) -> None:
    root = tmp_path / "session"
    root.mkdir()
    watched = Watched("a1", (root,), Quota(1024 * 1024, 100), threading.Event())
    watched.baseline = watched.usage()

    for number in range(150):
        (root / f"f{number}").touch()
    watched.check()

    assert watched.exceeded is not None
    assert "SUREHAND_AGENT_DISK_FILES" in watched.exceeded
    assert watched.wake.is_set()
    with pytest.raises(Exception, match="its directory was removed") as interrupted:
        watched.raise_if_over()
    assert getattr(interrupted.value, "cause", None) == "quota_exceeded"
    assert Usage(10, 10).over(Quota(100, 100)) is None


def test_the_watch_measures_at_once_when_a_file_system_loses_more_than_a_session_may_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between its regular rounds (here a minute apart) the watch looks at the free space of
    the sessions' file systems every tick: a drop past the tightest headroom starts a round."""
    watch = quota_watch.QuotaWatch(every=60.0)
    watched = Watched("a1", (tmp_path,), Quota(8 * 1024 * 1024, 1000), threading.Event())
    watched.added = Usage(6 * 1024 * 1024, 10)  # 2 MiB and 990 files left
    free = iter([Usage(100 * 1024 * 1024, 5000), *[Usage(97 * 1024 * 1024, 5000)] * 1000])
    monkeypatch.setattr(quota_watch, "_free", lambda _path: next(free))
    monkeypatch.setattr(quota_watch, "TICK", 0.001)

    assert watch.until_next_round([watched]) is True  # 3 MiB gone: more than its 2 MiB of headroom

    watch.every = 0.05
    free = iter([Usage(100 * 1024 * 1024, 5000)] * 1000)
    assert watch.until_next_round([watched]) is False  # nothing lost: the regular round comes


def test_a_session_that_ends_over_its_quota_is_interrupted_and_goes_through_admission(
    harness: Harness,
) -> None:
    """Even one that wrote its flood and ended between two rounds of the watch: its result
    is not taken, its directory is removed, and admission decides what comes next."""
    sh = harness.surehand(
        agents="DEV=command",
        command_agent="sh -c 'head -c 4000000 /dev/urandom > flood.bin; echo all done'",
        agent_disk_mib=1,
        agent_quota_check_seconds=60.0,
    )
    task_id = committed_task(sh)

    outcome = sh.run_session(task_id)
    sh.reconcile()

    assert outcome.outcome == "interrupted", outcome
    [attempt] = attempts_of(sh.store, task_id)
    assert (attempt.state, attempt.cause) == (AttemptState.INTERRUPTED, AttemptCause.QUOTA_EXCEEDED)
    assert "over its 1 MiB (SUREHAND_AGENT_DISK_MIB)" in (attempt.error or "")
    assert not (harness.work_dir / attempt.attempt_id).exists()
    assert reports_of(sh.store, task_id) == []
    [case] = sh.cases()
    assert case.admission is Admission.REEXECUTE  # nothing was declared: none_verified


def test_a_finished_sessions_outputs_keep_only_what_is_read_of_them(tmp_path: Path) -> None:
    with open_private(tmp_path / "out", "stdout.txt") as output:
        output.write(b"x" * (4 * MAX_OUTPUT) + b"the end")
        output.flush()
        before = tail_of(output)

        keep_tail(output)

        assert os.fstat(output.fileno()).st_size == MAX_OUTPUT
        assert tail_of(output) == before


def test_no_session_starts_below_the_free_space_the_worker_keeps(tmp_path: Path) -> None:
    roomy = Settings(work_dir=tmp_path / "sessions", work_dir_min_free_mib=1)
    cramped = Settings(work_dir=tmp_path / "sessions", work_dir_min_free_mib=2**40)

    quotas.require_free_space(roomy)
    with pytest.raises(NoSpaceForSessions, match="SUREHAND_WORK_DIR_MIN_FREE_MIB") as refused:
        quotas.require_free_space(cramped)
    assert refused.value.retryable
