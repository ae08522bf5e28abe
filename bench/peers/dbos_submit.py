"""DBOS keyed workflows for ``bench/create/submit.py`` (imported only when DBOS is installed).

``launch`` starts DBOS in this process on its system database (an empty Postgres database)
and finishes ``replays`` workflows whose ids ``start`` can call again. ``submission`` is a
workflow taking the request as its input, with one step that returns a TASK id: DBOS records
the input, the step's output and the end state; a call under an id that already finished
returns the recorded result. ``enqueue`` only records a keyed workflow on a queue that no
process serves.
"""

from __future__ import annotations

import uuid
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID

PARKED_QUEUE = "bench_submit_parked"  # never registered: nothing dequeues it


@DBOS.step()
def allocate(request: dict[str, Any]) -> str:
    return "TASK-" + uuid.uuid4().hex[:12]


@DBOS.workflow(name="submission")
def submission(request: dict[str, Any]) -> str:
    return allocate(request)


def launch(system_database_url: str, request: dict[str, Any], replays: int) -> list[str]:
    config: DBOSConfig = {
        "name": "surehand-bench-submit",
        "system_database_url": system_database_url,
        "application_version": "bench",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    ids = [f"replay-{uuid.uuid4().hex}" for _ in range(replays)]
    for workflow_id in ids:
        start(workflow_id, request)
    return ids


def start(workflow_id: str, request: dict[str, Any]) -> str:
    with SetWorkflowID(workflow_id):
        return submission(request)


def enqueue(workflow_id: str, request: dict[str, Any]) -> None:
    with SetWorkflowID(workflow_id):
        DBOS.enqueue_workflow(PARKED_QUEUE, submission, request)


def shutdown() -> None:
    DBOS.destroy()
