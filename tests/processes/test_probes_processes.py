"""A probe registered the documented way decides an interrupted effect in a real deployment:
``surehand worker`` and ``surehand beat`` processes, Postgres, and a private ``redis-server``
(broker and leases). Beat schedules the reconciler; its passes run in the workers, which load
``tests.probes_agents`` through SUREHAND_AGENTS and the probe through SUREHAND_PROBES or the
module's ``@sh.probe``. The test process only writes the TASK and reads: it has no probe and
runs no admission.

The first worker kills itself (SIGKILL) at a crash point inside the probed operation: after its
effect (the ledger has the charge, its outcome was never recorded) or after its intent (no
charge). A second worker, started after the kill, runs the reconciler's passes and any
successor. Settings are scaled down: lease TTL 1 s, heartbeat 0.3 s, grace 0.5 s, reconcile
every 0.5 s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from surehand.facade import Surehand
from surehand.model import Admission, Bucket, EffectFact, OperationState
from tests.deployment import Deployment
from tests.probes_agents import EFFECTS_ENV, PROBE_ENV, charged
from tests.shared.probes_processes import decided, killed_then_succeeded

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.parametrize("store", ["postgres"], indirect=True),
]


REGISTRATIONS = {
    # How the operator registers the probe the ``charge`` operation names.
    "SUREHAND_PROBES": {
        PROBE_ENV: "ledger_by_setting",
        "SUREHAND_PROBES": "ledger_by_setting=tests.probes_agents:ledger",
    },
    "sh.probe-in-agents-module": {PROBE_ENV: "ledger_by_decorator"},
}


@pytest.mark.parametrize("registration", sorted(REGISTRATIONS))
@pytest.mark.parametrize(
    ("crash_at", "admission", "charges"),
    [
        ("operation.after_effect", Admission.RECONCILE_ONLY, [1]),
        ("operation.after_intent", Admission.REEXECUTE, [2]),
    ],
    ids=["effect-present", "effect-absent"],
)
def test_a_probe_registered_the_documented_way_decides_in_a_worker_and_beat_deployment(
    probes_deployment: Deployment,
    registration: str,
    crash_at: str,
    admission: Admission,
    charges: list[int],
) -> None:
    probes_deployment.env.update(REGISTRATIONS[registration])
    probe = probes_deployment.env[PROBE_ENV]
    sh = Surehand(database_url=probes_deployment.store.url)  # no probe here; runs no admission
    doomed = probes_deployment.worker(SUREHAND_CRASH_AT=crash_at)
    [announced] = [line for line in doomed.output().splitlines() if "probes registered" in line]
    assert probe in announced
    task_id = killed_then_succeeded(
        probes_deployment, sh, doomed, "Charge acme", "Charge acme once."
    )

    case = decided(sh, task_id, probes_deployment)

    assert case.admission is admission
    assert case.effect_fact is not EffectFact.UNKNOWN
    assert case.decided_by == "reconciler"
    interrupted = sh.operations(task_id)[0]
    present = admission is Admission.RECONCILE_ONLY
    assert interrupted.outcome == {
        "probe": "present" if present else "absent",
        "source": f"probe:{probe}",
    }
    assert interrupted.state is (OperationState.SUCCEEDED if present else OperationState.FAILED)
    probes_deployment.wait(lambda: sh.get_task(task_id).bucket is Bucket.REVIEW, "the REPORT")
    assert sh.get_task(task_id).hold is None
    # The ledger's own record: charged exactly once, by the attempt admission allowed.
    assert charged(task_id, Path(probes_deployment.env[EFFECTS_ENV])) == charges
    assert len(sh.attempts(task_id)) == max(charges)
    sh.close()
