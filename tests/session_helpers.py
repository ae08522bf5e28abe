"""Shared helpers for the session tests: a harness that wires ``Surehand`` handles to the test
store and a Redis, committed TASKs, store readers, test agents for real worker processes, and
subprocess entry points.

Agents here are importable by worker processes started from the repository root
(``SUREHAND_AGENTS=DEV=tests.session_helpers:counting_agent``), so this module must stay cheap
to import and must not import ``tests.conftest``.

Run as a program it does one thing against a database and prints one JSON line::

    python -m tests.session_helpers claim --url URL --task T --name NAME
    python -m tests.session_helpers operate --url URL --task T --marker PATH [--key K]

``claim`` connects first, prints ``ready`` and waits for a line on stdin, so that a test can
release several processes at once; then it calls ``claims.claim``. ``operate`` claims the
TASK and declares one operation whose effect creates ``PATH``; ``SUREHAND_CRASH_AT`` applies.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from surehand.agents.context import SessionContext
from surehand.clock import Clock
from surehand.config import Settings
from surehand.dispatcher.claims import claim
from surehand.dispatcher.context import Services
from surehand.dispatcher.operations import run_operation
from surehand.dispatcher.sessions import Session
from surehand.dispatcher.submissions import write_task
from surehand.facade import Surehand
from surehand.model import Attempt, EventKind, Operation, Report, RetryPolicy, Task, TaskEvent
from surehand.queue.keys import namespace_pattern
from surehand.store import Store, attempts, events, operations, reports, tasks
from surehand.store import schema as tables
from surehand.testing import ManualClock
from tests.redis_fixtures import real_redis_url

REPO = Path(__file__).resolve().parent.parent
REDIS_URL_ENV = "SUREHAND_TEST_REDIS_URL"
RUNS_FILE_ENV = "SESSION_TEST_RUNS_FILE"
HOLD_ENV = "SESSION_TEST_HOLD_SECONDS"

BASE_TASK: dict[str, Any] = {
    "sender": "PM",
    "recipient": "DEV",
    "subject": "Rotate the API keys",
    "body": "Rotate the staging API keys and say where the new ones are.",
}


def lease_redis_url() -> str:
    """The real Redis for leases when the suite has one, else the in-process fakeredis."""
    return os.environ.get(REDIS_URL_ENV, "") or "fakeredis://"


# -- the harness -----------------------------------------------------------------------------


@dataclass
class Harness:
    """Builds ``Surehand`` handles on one test store, one Redis and one Redis namespace."""

    store: Store
    clock: Clock
    redis_url: str
    work_dir: Path
    namespace: str = field(default_factory=lambda: f"test-{uuid.uuid4().hex[:16]}")
    handles: list[Surehand] = field(default_factory=list)

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": self.store.url,
            "redis_url": self.redis_url,
            "redis_namespace": self.namespace,
            "work_dir": self.work_dir,
            "lease_ttl_seconds": 10.0,
            "heartbeat_seconds": 0.05,
            "lost_grace_seconds": 0.0,
        }
        values.update(overrides)
        return Settings.model_validate(values)

    def surehand(self, **overrides: Any) -> Surehand:
        """A handle with test settings (short heartbeat) plus ``overrides``; closed afterwards."""
        handle = Surehand(settings=self.settings(**overrides), clock=self.clock)
        self.handles.append(handle)
        return handle

    def close(self) -> None:
        for handle in self.handles:
            if "leases" in handle.__dict__:  # only if it was ever connected
                client = handle.leases.client
                stale = list(client.scan_iter(match=namespace_pattern(self.namespace)))
                if stale:
                    client.delete(*stale)
            handle.close()


@pytest.fixture
def harness(store: Store, clock: ManualClock, tmp_path: Path) -> Iterator[Harness]:
    """Leases on the real Redis when the suite has one, else on fakeredis."""
    built = Harness(store, clock, lease_redis_url(), tmp_path / "sessions")
    yield built
    built.close()


@pytest.fixture
def redis_harness(store: Store, clock: ManualClock, tmp_path: Path) -> Iterator[Harness]:
    """Leases on the real Redis only (skipped locally, failed in CI, without one)."""
    built = Harness(store, clock, real_redis_url(), tmp_path / "sessions")
    yield built
    built.close()


# -- TASKs and records -----------------------------------------------------------------------


def task_request(**overrides: Any) -> dict[str, Any]:
    return {**BASE_TASK, "client_submission_id": f"sub-{uuid.uuid4().hex[:12]}", **overrides}


def committed_task(services: Services | Surehand, **overrides: Any) -> str:
    """Create a committed TASK in ``inbox`` and return its id."""
    if isinstance(services, Surehand):
        result = services.write_task(task_request(**overrides))
    else:
        result = write_task(services, task_request(**overrides), tenant="default")
    assert result.disposition.value == "created", result
    assert result.task_id is not None
    return result.task_id


def read_task(store: Store, task_id: str) -> Task:
    with store.snapshot() as connection:
        task = tasks.get(connection, task_id)
    assert task is not None
    return task


def attempts_of(store: Store, task_id: str) -> list[Attempt]:
    with store.snapshot() as connection:
        return attempts.for_task(connection, task_id)


def operations_of(store: Store, task_id: str) -> list[Operation]:
    with store.snapshot() as connection:
        return operations.for_task(connection, task_id)


def reports_of(store: Store, task_id: str) -> list[Report]:
    with store.snapshot() as connection:
        return reports.for_task(connection, task_id)


def events_of(store: Store, task_id: str, kind: EventKind | None = None) -> list[TaskEvent]:
    with store.snapshot() as connection:
        return events.history(connection, task_id, kind)


def rows_of(store: Store, task_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every stored row that belongs to a TASK except its events, column by column."""
    found: dict[str, list[tuple[Any, ...]]] = {}
    with store.snapshot() as connection:
        for table in (tables.tasks, tables.attempts, tables.operations, tables.reports):
            rows = connection.execute(
                select(table).where(table.c.task_id == task_id).order_by(*table.primary_key)
            ).all()
            found[table.name] = [tuple(row) for row in rows]
    return found


def claimed(services: Services, task_id: str, worker: str = "test-worker") -> Session:
    session = claim(services, task_id, worker=worker, message_id=None)
    assert session is not None, f"{task_id} was not claimable"
    return session


def failing_with_an_open_intent(runs: list[int], error: str) -> Callable[[SessionContext], str]:
    """An agent that notes its attempt's number in ``runs``, is killed inside an effect (its
    intent stays open) and then raises ``RuntimeError(error)``."""

    def agent(ctx: SessionContext) -> str:
        runs.append(ctx.attempt.number)

        def effect() -> None:
            raise SystemExit("killed mid-effect")  # not an Exception: the intent stays open

        with contextlib.suppress(SystemExit):
            ctx.operation("charge_card", {"amount": 5}, effect)
        raise RuntimeError(error)

    return agent


# -- agents for worker processes --------------------------------------------------------------


def counting_agent(ctx: SessionContext) -> str:
    """Appends one line per run to ``$SESSION_TEST_RUNS_FILE``, declares one operation, waits
    ``$SESSION_TEST_HOLD_SECONDS`` (interruptibly) and returns."""
    runs = Path(os.environ[RUNS_FILE_ENV])
    line = f"{ctx.task.task_id} {ctx.attempt.number} {os.getpid()}\n"
    with runs.open("a", encoding="utf-8") as handle:
        handle.write(line)
    ctx.operation("note_run", {"task_id": ctx.task.task_id}, lambda: os.getpid())
    ctx.wait_cancelled(float(os.environ.get(HOLD_ENV, "0.3")))
    return f"counted {ctx.task.task_id} in attempt {ctx.attempt.number}"


def run_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


# -- subprocess children ---------------------------------------------------------------------


def child_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.session_helpers", *args]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUREHAND_")}
    pythonpath = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return {**env, "PYTHONPATH": pythonpath, **extra}


def claim_in_processes(url: str, task_id: str, count: int) -> list[dict[str, Any]]:
    """``count`` processes, each connected and ready, released together to claim one TASK."""
    children = [
        subprocess.Popen(
            child_command("claim", "--url", url, "--task", task_id, "--name", f"claimer-{n}"),
            env=child_env(),
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            ready = child.stdout.readline().strip()
            assert ready == "ready", (ready, child.stderr.read() if child.stderr else "")
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def operate_in_process(
    url: str, task_id: str, marker: Path, *, key: str | None = None, crash_at: str = ""
) -> subprocess.CompletedProcess[str]:
    args = ["operate", "--url", url, "--task", task_id, "--marker", str(marker)]
    if key is not None:
        args += ["--key", key]
    env = child_env(SUREHAND_CRASH_AT=crash_at) if crash_at else child_env()
    return subprocess.run(
        child_command(*args),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def marker_effect(marker: Path) -> str:
    marker.write_text("effect happened\n", encoding="utf-8")
    return str(marker)


def marker_operation_args(marker: Path) -> Mapping[str, Any]:
    return {"path": str(marker)}


def _claim_main(store: Store, options: argparse.Namespace) -> dict[str, Any]:
    services = Services(store=store)
    with store.snapshot() as connection:  # connect (and check the schema) before the gate
        tasks.get(connection, options.task)
    print("ready", flush=True)
    sys.stdin.readline()
    session = claim(services, options.task, worker=options.name, message_id=options.name)
    return {
        "name": options.name,
        "won": session is not None,
        "attempt": session.attempt.number if session else None,
    }


def _operate_main(store: Store, options: argparse.Namespace) -> dict[str, Any]:
    services = Services(store=store)
    session = claim(services, options.task, worker="operator", message_id=None)
    assert session is not None
    marker = Path(options.marker)
    value = run_operation(
        session,
        "touch_marker",
        marker_operation_args(marker),
        lambda: marker_effect(marker),
        idempotency_key=options.key,
        retry_policy=RetryPolicy.KEYED if options.key else RetryPolicy.NONE,
        probe=None,
    )
    return {"value": value, "attempt_id": session.attempt.attempt_id}


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.session_helpers")
    parser.add_argument("command", choices=["claim", "operate"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--name", default="child")
    parser.add_argument("--marker", default="")
    parser.add_argument("--key", default=None)
    options = parser.parse_args(argv)
    store = Store(options.url)
    try:
        main = _claim_main if options.command == "claim" else _operate_main
        print(json.dumps(main(store, options)), flush=True)
    finally:
        store.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
