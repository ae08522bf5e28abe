"""Surehand instances on one broker share kombu's process-wide connection pool: closing one
must not close the pool the others still publish through."""

from __future__ import annotations

from pathlib import Path

from surehand.facade import Surehand
from surehand.queue import broker_pools
from tests.procs import RedisServer


def handle(tmp_path: Path, broker_url: str) -> Surehand:
    return Surehand(
        f"sqlite:///{tmp_path / 'surehand.sqlite3'}", broker_url=broker_url, redis_url=broker_url
    )


def create(sh: Surehand, subject: str) -> str:
    task_id = sh.write_task(sender="PM", recipient="DEV", subject=subject).task_id
    assert task_id is not None
    return task_id


def test_closing_one_instance_leaves_the_others_publishing(
    tmp_path: Path, broker: RedisServer
) -> None:
    first, second = handle(tmp_path, broker.url), handle(tmp_path, broker.url)
    create(first, "one")
    create(second, "two")
    first.close()
    task = second.get_task(create(second, "three"))
    assert task.published, task.dispatch_error
    assert task.dispatch_error is None
    second.close()


def test_the_last_instance_to_close_closes_the_shared_pool(
    tmp_path: Path, broker: RedisServer
) -> None:
    first, second = handle(tmp_path, broker.url), handle(tmp_path, broker.url)
    create(first, "one")
    create(second, "two")
    assert broker_pools.users(first.celery) == 2
    first.close()
    assert broker_pools.users(second.celery) == 1
    second.close()
    second.close()  # closing twice releases once
    third = handle(tmp_path, broker.url)
    assert broker_pools.users(third.celery) == 1
    assert third.get_task(create(third, "after")).published
    third.close()
