"""Flower sees sessions and holds: a real ``surehand worker``, a real ``surehand flower`` (Celery's
Flower on loopback) and a private redis-server broker; assertions read Flower's HTTP API."""

from __future__ import annotations

import ast
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from surehand.agents.context import SessionContext
from surehand.config import Settings
from surehand.facade import Surehand
from surehand.model import Admission, Bucket
from tests.procs import RedisServer, start_worker, wait_until
from tests.shared.flower import start_flower

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def interrupted_charge(ctx: SessionContext) -> str:
    """An agent whose effect never returns: the intent (no key, no probe) stays open."""
    ctx.operation("charge_card", {"amount_cents": 500}, lambda: time.sleep(3600))
    return "unreachable"


def environment(tmp_path: Path, broker: RedisServer, agents: str) -> dict[str, str]:
    return {
        "SUREHAND_DATABASE_URL": f"sqlite:///{tmp_path / 'surehand.sqlite3'}",
        "SUREHAND_BROKER_URL": broker.url,
        "SUREHAND_REDIS_URL": broker.url.removesuffix("/0") + "/1",
        "SUREHAND_AGENTS": agents,
        "SUREHAND_WORK_DIR": str(tmp_path / "sessions"),
        "SUREHAND_LEASE_TTL_SECONDS": "2",
        "SUREHAND_HEARTBEAT_SECONDS": "0.5",
        "PYTHONPATH": str(REPO),
        "FLOWER_UNAUTHENTICATED_API": "true",  # Flower 2 serves /api only with auth or this
    }


def flower_tasks(url: str, name: str) -> list[dict[str, Any]]:
    found = httpx.get(f"{url}/api/tasks", params={"taskname": name}, timeout=5).json()
    return [task for task in found.values() if task["name"] == name]


def literal(text: str | None) -> Any:
    """Flower shows args and results as Python reprs."""
    return ast.literal_eval(text) if text else None


def test_flower_shows_a_session_with_task_id_and_attempt(
    tmp_path: Path, broker: RedisServer
) -> None:
    env = environment(tmp_path, broker, "DEV=demo")
    worker = start_worker(env, tmp_path / "worker.log", roles="DEV")
    flower, url = start_flower(env, tmp_path / "flower.log")
    try:
        sh = Surehand(settings=Settings(**_settings(env)))
        task_id = sh.write_task(
            sender="PM", recipient="DEV", subject="Seen in Flower", client_submission_id="fl-1"
        ).task_id
        wait_until(lambda: sh.get_task(str(task_id)).bucket is Bucket.REVIEW, timeout=60)

        def succeeded() -> list[dict[str, Any]]:
            return [t for t in flower_tasks(url, "surehand.run_session") if t["state"] == "SUCCESS"]

        wait_until(lambda: bool(succeeded()), timeout=30, what="Flower to see the session")
        session = succeeded()[0]
        assert literal(session["args"]) == [task_id]
        result = literal(session["result"])
        assert result["task_id"] == task_id
        assert result["attempt"] == 1
        assert result["outcome"] == "settled"
        assert session["routing_key"] == "surehand.DEV"
    finally:
        flower.kill()
        worker.kill()


def test_flower_shows_a_held_task(tmp_path: Path, broker: RedisServer) -> None:
    env = environment(
        tmp_path, broker, "DEV=tests.processes.test_flower:interrupted_charge,QA=demo"
    )
    doomed = start_worker(env, tmp_path / "dev.log", roles="DEV")
    survivor = start_worker(env, tmp_path / "qa.log", roles="QA")  # also runs notices
    flower, url = start_flower(env, tmp_path / "flower.log")
    try:
        settings = Settings(**_settings(env), lost_grace_seconds=0.5)
        sh = Surehand(settings=settings)
        task_id = str(
            sh.write_task(
                sender="PM", recipient="DEV", subject="Charge", client_submission_id="fl-2"
            ).task_id
        )
        wait_until(lambda: bool(sh.operations(task_id)), timeout=60, what="the open intent")
        doomed.kill()  # SIGKILL mid-effect: the intent stays open, the lease expires

        def held() -> bool:
            sh.reconcile()  # with a broker, a pass that holds sends the hold notice
            return sh.get_task(task_id).hold is not None

        wait_until(held, timeout=30, interval=0.5, what="the reconciler to hold the TASK")
        case = sh.cases()[0]
        assert case.admission is Admission.HOLD_FOR_REVIEW

        def notices() -> list[dict[str, Any]]:
            return [t for t in flower_tasks(url, "surehand.hold_notice") if t["state"] == "SUCCESS"]

        wait_until(lambda: bool(notices()), timeout=30, what="Flower to see the hold notice")
        notice = notices()[0]
        assert literal(notice["args"]) == [task_id, case.case_id, 1]
        assert literal(notice["result"])["hold"] == "hold_for_review"
    finally:
        flower.kill()
        survivor.kill()
        doomed.kill()


def _settings(env: Mapping[str, str]) -> dict[str, Any]:
    return {
        "database_url": env["SUREHAND_DATABASE_URL"],
        "broker_url": env["SUREHAND_BROKER_URL"],
        "redis_url": env["SUREHAND_REDIS_URL"],
        "lease_ttl_seconds": 2.0,
        "heartbeat_seconds": 0.5,
    }
