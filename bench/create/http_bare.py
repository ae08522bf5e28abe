"""The bare peer of ``bench/create/http_api.py``: a FastAPI endpoint doing one INSERT+COMMIT,
nothing else.

    BENCH_HTTP_DATABASE_URL=postgresql://... python bench/create/http_bare.py --port 8100

``POST /v1/tasks`` parses the same JSON body as surehand's (a pydantic model with the request's
fields), inserts the row write_task would store for it into ``bench_bare_tasks`` (the columns
of ``tasks``, created by the bench) with a new id, commits on a raw psycopg connection and
answers 201 with the id. A sync endpoint (FastAPI's thread pool, as surehand's routes are),
connections handed out by a ``queue.Queue`` and opened as requests in flight need them (as
many as the clients at most: Postgres' 100 connections are shared), served by uvicorn
the way ``surehand api`` serves (``surehand.doors.serving``: one process, access log off).
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
from fastapi import FastAPI
from pydantic import BaseModel

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.create import submit_backends as backends
from surehand.doors.serving import serve


class BareRequest(BaseModel):
    sender: str
    recipient: str
    subject: str
    body: str
    priority: str = "normal"
    references: list[str] = []
    risk_level: str = "low"
    client_submission_id: str | None = None


def create_app(database_url: str) -> FastAPI:
    app = FastAPI()
    pool: queue.Queue[psycopg.Connection[Any]] = queue.Queue()
    columns = backends.bare_columns()
    sql = backends.driver_insert_sql(columns)
    row = backends.row_like_write_task()

    @app.post("/v1/tasks", status_code=201)
    def create_task(request: BareRequest) -> dict[str, str]:
        task_id = "BARE-" + uuid.uuid4().hex[:24]
        values = {**row, "task_id": task_id, "subject": request.subject, "body": request.body}
        values["client_submission_id"] = request.client_submission_id
        try:
            connection = pool.get_nowait()
        except queue.Empty:  # the pool grows to the requests in flight, like SQLAlchemy's
            connection = psycopg.connect(database_url)
        try:
            connection.execute(sql, backends.driver_values(columns, values))
            connection.commit()
        finally:
            pool.put(connection)
        return {"task_id": task_id}

    return app


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--loglevel", default="warning")
    options = parser.parse_args()
    app = create_app(os.environ["BENCH_HTTP_DATABASE_URL"])
    print(f"bare API on http://{options.host}:{options.port}", file=sys.stderr, flush=True)
    serve(app, options.host, options.port, log_level=options.loglevel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
