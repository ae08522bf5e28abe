"""A hostile agent under a real ``surehand worker`` against the sandbox's view and its quotas
(issue 29 items 5 and 6): it sees nothing of the host it was not given (the worker user's home,
the checkout's dotfiles, ``/etc/shadow``), and what it floods -- its directory, files, its
``/tmp``, ``/dev/shm`` and ``/run`` -- is refused or stopped, while a sibling session and new
TASKs keep working. A worker whose work directory runs out of room starts no session and
leaves the TASK for later; it runs once there is room again.

The probes are in ``tests/hostile_view.py``. In the fallback (``none``) the test asserts what
docs/agents/sandbox.md says that mode promises: the quotas hold, the view is the host's.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from surehand.agents import view
from surehand.facade import Surehand
from surehand.model import AttemptCause, AttemptState, Bucket
from surehand.store import Store
from tests import hostile_view
from tests.procs import RedisServer, running, start_worker, wait_until
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.shared.hostile_agents import AGENT, Deployment
from tests.shared.workers import worker_env
from tests.skips import missing

REPO = Path(__file__).resolve().parents[2]
HOME = Path(os.path.expanduser("~"))
QUOTA_MIB, QUOTA_FILES, TMPFS_MIB = 64, 3000, 16
SECRETS = [  # what an agent must never see of the host
    *(str(HOME / name) for name in (".ssh", ".claude", ".npmrc", ".gitconfig", ".cache")),
    "/home",
    str(REPO / ".git"),
    str(REPO / "pyproject.toml"),
    *("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh", "/etc/ssl/private"),
    *("/etc/npmrc", "/etc/pip.conf"),
]
NEEDED = ["/etc/passwd", "/etc/resolv.conf", str(view.PACKAGE / "__init__.py")]


# Small quotas and tmpfs for the hostile worker, watched often.
HOSTILE_SETTINGS = {
    "SUREHAND_AGENT_DISK_MIB": str(QUOTA_MIB),
    "SUREHAND_AGENT_DISK_FILES": str(QUOTA_FILES),
    "SUREHAND_AGENT_TMPFS_MIB": str(TMPFS_MIB),
    "SUREHAND_AGENT_QUOTA_CHECK_SECONDS": "0.25",
}
pytestmark = [pytest.mark.slow, pytest.mark.hostile_settings(**HOSTILE_SETTINGS)]


def stopped_over_quota(
    hostile_deployment: Deployment, task_id: str, setting: str
) -> dict[str, Any]:
    """How a flooding TASK ended: every attempt interrupted by its quota, naming ``setting``,
    its directory gone; the TASK held once the interruptions repeat."""
    attempts = attempts_of(hostile_deployment.store, task_id)
    sessions = hostile_deployment.tmp_path / "sessions"
    return {
        "causes": {(a.state, a.cause) for a in attempts},
        "names_the_setting": all(setting in (a.error or "") for a in attempts),
        "directories_left": [a.attempt_id for a in attempts if (sessions / a.attempt_id).exists()],
        "held": read_task(hostile_deployment.store, task_id).hold is not None,
        "reports": len(reports_of(hostile_deployment.store, task_id)),
    }


STOPPED = {
    "causes": {(AttemptState.INTERRUPTED, AttemptCause.QUOTA_EXCEEDED)},
    "names_the_setting": True,
    "directories_left": [],
    "held": True,  # after SUREHAND_MAX_CONSECUTIVE_INTERRUPTIONS re-executions
    "reports": 0,
}


def test_a_flooding_agent_is_stopped_by_its_quota_while_a_sibling_and_new_tasks_work(
    hostile_deployment: Deployment,
) -> None:
    bwrap = hostile_deployment.mode == "bwrap"
    sibling = hostile_deployment.submit("sleep", seconds=6)
    floods = {
        "disk": hostile_deployment.submit("disk_flood", mib=QUOTA_MIB * 8),
        "files": hostile_deployment.submit("files_flood", files=QUOTA_FILES * 10),
    }
    if bwrap:  # the fallback has no /tmp of its own: nothing of the session to count there
        floods["tmp_files"] = hostile_deployment.submit(
            "files_flood", files=QUOTA_FILES * 10, where="/tmp", hold=30
        )
    for name, task_id in [*floods.items(), ("sibling", sibling)]:
        wait_until(
            functools.partial(hostile_deployment.finished, task_id),
            timeout=180,
            what=f"the {name} TASK",
        )
    later = hostile_deployment.run("sleep", seconds=0.1)  # a new TASK after the floods

    assert (
        stopped_over_quota(hostile_deployment, floods["disk"], "SUREHAND_AGENT_DISK_MIB") == STOPPED
    )
    assert (
        stopped_over_quota(hostile_deployment, floods["files"], "SUREHAND_AGENT_DISK_FILES")
        == STOPPED
    )
    if bwrap:
        tmp_files = stopped_over_quota(
            hostile_deployment, floods["tmp_files"], "SUREHAND_AGENT_DISK_FILES"
        )
        assert tmp_files == STOPPED
    assert hostile_deployment.findings(sibling) == {"slept": 6}
    assert hostile_deployment.findings(later) == {"slept": 0.1}
    assert hostile_deployment.worker.returncode is None


@pytest.mark.parametrize(
    "hostile_deployment", ["bwrap"], indirect=True
)  # the fallback has no tmpfs
def test_the_sandboxs_tmpfs_mounts_are_sized_and_the_rest_is_read_only(
    hostile_deployment: Deployment,
) -> None:
    task_id = hostile_deployment.run("tmpfs_flood", mib=TMPFS_MIB * 4)

    found = hostile_deployment.findings(task_id)

    full = "No space left on device"
    assert {place: seen["refused"] for place, seen in found.items()} == {
        "/tmp": full, "/dev/shm": full, "/run": full,
    }  # fmt: skip
    assert found["/tmp"]["mib"] <= TMPFS_MIB
    assert found["/dev/shm"]["mib"] <= TMPFS_MIB
    assert found["/run"]["mib"] <= 1


def test_the_agent_sees_no_home_no_checkout_and_no_secrets_of_the_host(
    hostile_deployment: Deployment,
) -> None:
    task_id = hostile_deployment.run("view", paths=[*SECRETS, *NEEDED])

    found = hostile_deployment.findings(task_id)

    on_host = [path for path in SECRETS if os.path.lexists(path)]
    assert len(on_host) >= 4, on_host  # the test looks for what is really there
    if (
        hostile_deployment.mode == "none"
    ):  # docs/agents/sandbox.md: the host's files, as the worker's user
        kind = {path: seen.split(":")[0] for path, seen in found["paths"].items()}
        assert kind == {path: hostile_view.seen_as(path).split(":")[0] for path in found["paths"]}
        return
    assert {path: found["paths"][path] for path in SECRETS} == dict.fromkeys(SECRETS, "absent")
    assert all(found["paths"][path].startswith(("read", "listed")) for path in NEEDED), found
    assert set(found["root"]) <= allowed_top_level(hostile_deployment.tmp_path), found["root"]
    assert found["writes"] == dict.fromkeys(
        ("/", "/etc", "/usr", "/dev"), "refused: Read-only file system"
    )


def allowed_top_level(tmp_path: Path) -> set[str]:
    """What ``/`` may hold in the sandbox: the system's directories and the first part of
    each path bound in (the runtime, the stand-in, the session directory's parents)."""
    system = {name.strip("/") for name in view.SYSTEM} | {"etc", "dev", "proc", "tmp", "run"}
    bound = [*view.runtime_paths(), tmp_path, AGENT]
    return system | {path.parts[1] for path in bound}


# -- the work directory's free space ----------------------------------------------------------


@pytest.fixture
def small_file_system() -> Iterator[Path]:
    """A 48 MiB tmpfs for the work directory (unmounted after)."""
    if os.getuid() != 0 or shutil.which("mount") is None:
        missing("root and mount (to give the work directory a small file system)")
    where = Path(tempfile.mkdtemp(prefix="surehand-small-fs-", dir="/var/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def test_a_worker_short_of_space_starts_no_session_and_the_task_runs_once_there_is_room(
    store: Store,
    broker: RedisServer,
    reconciling_client: Surehand,
    tmp_path: Path,
    small_file_system: Path,
) -> None:
    filler = small_file_system / "filler.bin"
    with filler.open("wb") as file:
        file.write(b"\0" * (40 * 1024 * 1024))  # 8 MiB left, under the 16 the worker keeps
    env = worker_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENTS="DEV=command",
        SUREHAND_COMMAND_AGENT="echo done",
        SUREHAND_WORK_DIR=str(small_file_system / "sessions"),
        SUREHAND_WORK_DIR_MIN_FREE_MIB="16",
        SUREHAND_WORK_DIR_RETRY_SECONDS="0.5",
    )
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        created = reconciling_client.write_task(
            sender="PM", recipient="DEV", subject="Work", body="Say done."
        )
        task_id = str(created.task_id)
        wait_until(
            lambda: worker.output().count(f"{task_id} not started") >= 3,
            timeout=60,
            what="the worker to refuse the session a few times",
        )
        waiting = (read_task(store, task_id), attempts_of(store, task_id))

        filler.unlink()  # room again
        wait_until(
            lambda: read_task(store, task_id).bucket is Bucket.REVIEW,
            timeout=60,
            what="the TASK to run once there is room",
        )

    task, attempts = waiting
    assert (task.bucket, task.hold, attempts) == (Bucket.INBOX, None, [])
    assert "SUREHAND_WORK_DIR_MIN_FREE_MIB" in worker.output()
    assert [report.body for report in reports_of(store, task_id)] == ["done"]
    assert len(attempts_of(store, task_id)) == 1
