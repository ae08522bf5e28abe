"""What other test modules need from ``tests/processes/test_probes_processes.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import Admission, InterruptionCase
from surehand.store import Store
from tests.deployment import Deployment, deployed
from tests.probes_agents import EFFECTS_ENV
from tests.procs import Proc


@pytest.fixture
def probes_deployment(store: Store, tmp_path: Path) -> Iterator[Deployment]:
    env = {
        "SUREHAND_AGENTS": "DEV=tests.probes_agents:charge",
        EFFECTS_ENV: str(tmp_path / "ledger.jsonl"),
    }
    with deployed(store, tmp_path, "probes", env) as built:
        yield built


def decided(sh: Surehand, task_id: str, probes_deployment: Deployment) -> InterruptionCase:
    def ready() -> bool:
        found = sh.cases(task_id=task_id)
        return bool(found) and found[0].admission not in (None, Admission.NOT_ADMITTED)

    probes_deployment.wait(ready, f"the interruption case of {task_id} to be decided")
    [case] = sh.cases(task_id=task_id)
    return case


def killed_then_succeeded(
    probes_deployment: Deployment, sh: Surehand, doomed: Proc, subject: str, body: str
) -> str:
    """Start beat, write a TASK for DEV, wait until ``doomed`` SIGKILLed itself at its crash
    point and start a clean worker; the TASK's id."""
    probes_deployment.beat()
    task_id = sh.write_task(sender="PM", recipient="DEV", subject=subject, body=body).task_id
    assert task_id is not None
    probes_deployment.wait(lambda: doomed.returncode is not None, "the first worker to die")
    assert doomed.returncode == -signal.SIGKILL, doomed.output()[-2000:]
    probes_deployment.worker()
    return task_id
