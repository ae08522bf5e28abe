"""Recording that a TASK was published is one durable statement, not a transaction.

After the creating transaction commits, ``publish_after_commit`` publishes the TASK and sets
its ``published`` flag: a single UPDATE. On Postgres it runs in autocommit
(``Store.one_write``), one round trip instead of BEGIN, UPDATE, COMMIT; on SQLite it stays a
transaction (statements run in-process).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import event

from surehand.dispatcher.context import Services
from surehand.dispatcher.dispatch import publish_after_commit
from surehand.dispatcher.submissions import write_task
from surehand.model import Task
from surehand.store import tasks

REQUEST = {
    "sender": "PM",
    "recipient": "DEV",
    "subject": "Publish once",
    "body": "Nothing to do.",
    "client_submission_id": "publish-write-1",
}


def test_published_flag_is_one_statement(services: Services) -> None:
    created = write_task(services, REQUEST, tenant="default")  # no publisher: not published
    assert created.task_id is not None
    published: list[Task] = []
    publishing = replace(services, publisher=published.append)
    store = services.store
    updates: list[Any] = []

    def on_execute(connection: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if sql.lstrip().upper().startswith("UPDATE"):
            updates.append(connection.engine)

    engines = {store.engine, store.one_statement_engine}
    for engine in engines:
        event.listen(engine, "before_cursor_execute", on_execute)
    try:
        assert publish_after_commit(publishing, created.task_id)
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", on_execute)

    assert [task.task_id for task in published] == [created.task_id]
    with store.snapshot() as connection:
        task = tasks.get(connection, created.task_id)
    assert task is not None
    assert task.published
    # On Postgres the autocommit engine (one round trip), never a transaction on the main one.
    expected = store.one_statement_engine if store.dialect == "postgresql" else store.engine
    assert updates == [expected]
