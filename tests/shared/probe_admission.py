"""What other test modules need from ``tests/probes/test_probe_admission.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

from tests.git_remotes import Remote
from tests.recovery_helpers import Rig


def push_args(remote: Remote, commit: str, url: str | None = None) -> dict[str, str]:
    return {"remote": url or remote.url, "ref": "refs/heads/feature", "commit": commit}


def interrupted_push(rig: Rig, remote: Remote, commit: str, url: str | None = None) -> str:
    task_id = rig.new_task()
    session = rig.claim(task_id)
    rig.intent(
        session, "git.push", args={"ref": "feature"}, probe="git.push",
        probe_args=push_args(remote, commit, url),
    )  # fmt: skip
    return task_id
