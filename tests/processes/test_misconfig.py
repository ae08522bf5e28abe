"""Misconfigured deployments fail loudly (issue 12, findings 2-6), each with its message.

Deployment commands refuse to run on in-process stand-ins unless ``--embedded`` says so; a
worker without an agent lists the choices; ``surehand check`` fails on a deployment with no
agent for a served role; database errors name their real cause and the fix, never a raw
traceback; read commands never create a store and say where they looked; ``surehand flower``
serves its API on loopback out of the box and asks for credentials elsewhere; beat's schedule
lives under SUREHAND_HOME.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from surehand.cli.flower_command import _flower_auth
from surehand.errors import (
    BadDatabaseUrl,
    ConfigError,
    DatabaseAuthFailed,
    DatabaseBusy,
    DatabaseMissing,
    DatabaseUnreachable,
    StoreUnavailable,
    SurehandError,
)
from surehand.store import Store
from tests.conftest import PG_URL, REDIS_URL, require
from tests.procs import SUREHAND, free_port, private_redis, spawn, wait_until
from tests.shared.misconfig import REPO, UNUSED_REDIS, sqlite_url, surehand

SERVICE_VARIABLES = ("SUREHAND_BROKER_URL", "SUREHAND_REDIS_URL")
EXIT_RETRY = 75


# -- finding 2: deployment commands need shared services --------------------------------------


@pytest.mark.parametrize(
    ("args", "needed"),
    [
        (["worker", "--roles", "DEV"], SERVICE_VARIABLES),
        (["beat"], ("SUREHAND_BROKER_URL",)),
        (["api"], SERVICE_VARIABLES),
        (["reconcile", "--once"], ("SUREHAND_REDIS_URL",)),
    ],
    ids=["worker", "beat", "api", "reconcile"],
)
def test_a_deployment_command_refuses_to_run_without_its_shared_services(
    tmp_path: Path, store_url: str, args: list[str], needed: tuple[str, ...]
) -> None:
    refused = surehand(
        tmp_path, *args, code=1, SUREHAND_DATABASE_URL=store_url, SUREHAND_AGENTS="DEV=demo"
    )
    message = refused.stderr
    assert f"surehand {args[0]} is a deployment command and needs shared services" in message
    for variable in needed:
        assert variable in message
    for variable in set(SERVICE_VARIABLES) - set(needed):
        assert variable not in message
    assert "--embedded (SUREHAND_EMBEDDED=1)" in message


def test_a_memory_broker_is_no_shared_broker(tmp_path: Path, store_url: str) -> None:
    refused = surehand(
        tmp_path,
        "worker",
        "--roles",
        "DEV",
        code=1,
        SUREHAND_DATABASE_URL=store_url,
        SUREHAND_BROKER_URL="memory://",
        SUREHAND_REDIS_URL=UNUSED_REDIS,
        SUREHAND_AGENTS="DEV=demo",
    )
    assert "set SUREHAND_BROKER_URL (the broker its TASKs are queued on)" in refused.stderr


def test_embedded_is_an_option_with_its_variable_and_runs_the_old_way(
    tmp_path: Path, store_url: str
) -> None:
    for command in ("worker", "beat", "api", "reconcile"):
        shown = surehand(tmp_path, command, "--help", code=0).stdout
        assert "--embedded" in shown, command
        assert "SUREHAND_EMBEDDED" in shown, command
    passed = surehand(
        tmp_path, "reconcile", "--embedded", "--json", code=0, SUREHAND_DATABASE_URL=store_url
    )
    assert json.loads(passed.stdout)["running"] == 0


# -- finding 5: a worker's agent -------------------------------------------------------------


def test_a_worker_without_an_agent_lists_the_choices(tmp_path: Path, store_url: str) -> None:
    refused = surehand(
        tmp_path,
        "worker",
        "--roles",
        "DEV,QA",
        code=1,
        SUREHAND_DATABASE_URL=store_url,
        SUREHAND_BROKER_URL=UNUSED_REDIS,
        SUREHAND_REDIS_URL=UNUSED_REDIS,
        SUREHAND_AGENTS="QA=demo",
    )
    message = refused.stderr
    assert "(no_agent_for_role): no agent for role DEV in this worker: set SUREHAND_AGENTS" in (
        message
    )
    assert "DEV=demo" in message
    assert "DEV=command with SUREHAND_COMMAND_AGENT=" in message
    assert "DEV=package.module:function" in message


@pytest.fixture
def deployment_env(tmp_path: Path, store_url: str) -> dict[str, str]:
    """A store, the shared Redis as broker and leases: what `check` needs to say ok."""
    require(REDIS_URL, "redis")
    return {
        "SUREHAND_DATABASE_URL": store_url,
        "SUREHAND_BROKER_URL": REDIS_URL,
        "SUREHAND_REDIS_URL": REDIS_URL,
    }


def checks(tmp_path: Path, code: int, **env: str) -> dict[str, dict[str, str]]:
    report = json.loads(surehand(tmp_path, "check", "--json", code=code, **env).stdout)
    return {item["name"]: item for item in report["checks"]}


def test_check_fails_on_a_deployment_with_no_agent(
    tmp_path: Path, deployment_env: dict[str, str]
) -> None:
    found = checks(tmp_path, 1, **deployment_env)
    assert found["agents"]["status"] == "fail"
    assert "SUREHAND_AGENTS is empty: workers refuse to start" in found["agents"]["detail"]
    assert "ROLE=demo" in found["agents"]["fix"]
    assert "not ready" in surehand(tmp_path, "check", code=1, **deployment_env).stdout


def test_check_lists_each_roles_agent_and_probes_and_fails_on_a_served_role_without_one(
    tmp_path: Path, deployment_env: dict[str, str]
) -> None:
    agents = {"SUREHAND_AGENTS": "DEV=demo,QA=tests.probes_agents:charge"}
    found = checks(tmp_path, 0, **deployment_env, **agents)
    assert found["agent DEV"] == {
        "name": "agent DEV",
        "status": "ok",
        "detail": "demo (built-in demo agent); probes: none",
        "fix": "",
    }
    assert found["agent QA"]["detail"] == (
        "tests.probes_agents:charge; probes: ledger_by_decorator"
    )
    served = checks(tmp_path, 1, **deployment_env, **agents, SUREHAND_ROLES="DEV,OPS")
    assert served["agent OPS"]["status"] == "fail"
    assert "no agent for this role" in served["agent OPS"]["detail"]
    assert "agent QA" not in served


# -- finding 3: database errors name their cause -----------------------------------------------


def pg_with(**parts: object) -> str:
    return make_url(require(PG_URL, "database")).set(**parts).render_as_string(hide_password=False)  # type: ignore[arg-type]


def open_error(url: str) -> SurehandError:
    store = Store(url)
    try:
        with pytest.raises(SurehandError) as raised:
            store.ensure_schema()
    finally:
        store.dispose()
    return raised.value


@pytest.fixture
def limited_role() -> Iterator[str]:
    """A Postgres login that may open no connection at all: 'too many connections'."""
    name = f"sh_limited_{uuid.uuid4().hex[:8]}"
    admin = create_engine(pg_with(), poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE ROLE {name} LOGIN CONNECTION LIMIT 0"))
    yield name
    with admin.connect() as connection:
        connection.execute(text(f"DROP ROLE {name}"))
    admin.dispose()


def test_a_missing_postgres_database_is_named_not_an_outage(tmp_path: Path) -> None:
    name = f"surehand_missing_{uuid.uuid4().hex[:8]}"
    url = pg_with(database=name)
    error = open_error(url)
    assert isinstance(error, DatabaseMissing)
    assert isinstance(error, ConfigError)
    assert isinstance(error, StoreUnavailable)
    assert not error.retryable
    assert isinstance(error.__cause__, Exception)  # raised from the driver's error
    shown = surehand(tmp_path, "tasks", code=1, SUREHAND_DATABASE_URL=url).stderr
    assert f'(database_missing): the database server answers, but database "{name}" does not ' in (
        shown
    )
    assert f"`createdb {name}`" in shown
    assert "unreachable or busy" not in shown


def test_a_refused_login_is_named(tmp_path: Path) -> None:
    url = pg_with(username=f"nobody_{uuid.uuid4().hex[:8]}")
    error = open_error(url)
    assert isinstance(error, DatabaseAuthFailed)
    assert not error.retryable
    shown = surehand(tmp_path, "tasks", code=1, SUREHAND_DATABASE_URL=url).stderr
    assert "(database_auth_failed): the database refused the login (role " in shown
    assert "fix the user and password in SUREHAND_DATABASE_URL" in shown


def test_too_many_connections_is_named_and_retryable(tmp_path: Path, limited_role: str) -> None:
    url = pg_with(username=limited_role)
    error = open_error(url)
    assert isinstance(error, DatabaseBusy)
    assert error.retryable
    shown = surehand(tmp_path, "tasks", code=EXIT_RETRY, SUREHAND_DATABASE_URL=url).stderr
    assert "the database has no free connection slot (too many connections for role" in shown
    assert "SUREHAND_DATABASE_POOL_SIZE" in shown


def test_an_unreachable_server_is_named_and_retryable(tmp_path: Path) -> None:
    url = pg_with(port=1)
    error = open_error(url)
    assert isinstance(error, DatabaseUnreachable)
    assert error.retryable
    shown = surehand(tmp_path, "tasks", code=EXIT_RETRY, SUREHAND_DATABASE_URL=url).stderr
    assert "cannot reach the database server (Connection refused)" in shown
    assert "check the host and port in SUREHAND_DATABASE_URL" in shown


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("foo.db", "SUREHAND_DATABASE_URL 'foo.db' is not a database URL (for a SQLite file: "),
        ("postgres://u@h/db", "postgres:// is spelled postgresql+psycopg:// here"),
        ("mysql://u@h/db", "unsupported database URL scheme 'mysql'"),
        ("postgres//u:s3cret@h/db", "SUREHAND_DATABASE_URL 'h/db' is not a database URL"),
    ],
)
def test_a_bad_database_url_is_a_config_error_without_traceback(
    tmp_path: Path, url: str, says: str
) -> None:
    with pytest.raises(BadDatabaseUrl) as raised:
        Store(url)
    assert says in raised.value.message
    assert "s3cret" not in raised.value.message
    submit = ["submit", "--sender", "PM", "--recipient", "DEV", "--subject", "x"]
    for command in (["tasks"], submit):
        shown = surehand(tmp_path, *command, code=1, SUREHAND_DATABASE_URL=url).stderr
        assert "(bad_database_url)" in shown
        assert says in shown
        assert "sqlite:///relative/file.sqlite3" in shown
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["tasks"], ["check"], ["worker", "--roles", "DEV"]])
def test_a_setting_pydantic_refuses_is_named_without_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    shown = surehand(tmp_path, *command, code=1, SUREHAND_LEASE_TTL_SECONDS="thirty").stderr
    assert "(config_error): invalid setting: SUREHAND_LEASE_TTL_SECONDS: Input should be " in (
        shown
    )
    assert "thirty" not in shown  # a value is never echoed: it may be a secret


# -- finding 4: read commands never create a store ---------------------------------------------


READ_COMMANDS = [
    ["tasks"],
    ["tasks", "--watch", "--task", "TASK-20260101-001", "--until-bucket", "done"],
    ["show", "TASK-20260101-001"],
    ["diagnose", "sub-1"],
    ["cases"],
    ["db", "current"],
    ["fcop", "export", "workspace"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=[" ".join(a[:2]) for a in READ_COMMANDS])
def test_a_read_command_creates_no_store_and_says_where_it_looked(
    tmp_path: Path, args: list[str]
) -> None:
    default = surehand(tmp_path, *args, code=1).stderr
    where = tmp_path / ".surehand" / "surehand.sqlite3"
    assert f"(store_missing): no surehand store at {where} (the default under " in default
    assert "SUREHAND_HOME=.surehand" in default
    assert "run `surehand up` or `surehand db upgrade` first" in default
    typo = tmp_path / "sotre" / "surehand.sqlite3"
    mistyped = surehand(tmp_path, *args, code=1, SUREHAND_DATABASE_URL=sqlite_url(typo)).stderr
    assert f"no surehand store at {typo} (from SUREHAND_DATABASE_URL" in mistyped
    assert list(tmp_path.iterdir()) == []


def test_check_reports_a_missing_store_without_creating_it(tmp_path: Path) -> None:
    found = checks(tmp_path, 0)
    where = tmp_path / ".surehand" / "surehand.sqlite3"
    assert found["database"]["status"] == "warn"
    assert found["database"]["detail"] == f"no surehand store at {where} yet"
    assert found["agents"]["status"] == "ok"  # `up` runs the demo agent
    assert list(tmp_path.iterdir()) == []
    deployment = checks(tmp_path, 1, SUREHAND_BROKER_URL="redis://127.0.0.1:1/0")
    assert deployment["database"]["status"] == "fail"
    assert list(tmp_path.iterdir()) == []


def test_writing_commands_still_create_the_embedded_store(tmp_path: Path) -> None:
    submit = ["submit", "--sender", "PM", "--recipient", "DEV", "--subject", "x", "--json"]
    created = json.loads(surehand(tmp_path, *submit, code=0).stdout)
    listed = json.loads(surehand(tmp_path, "tasks", "--json", code=0).stdout)
    assert [task["task_id"] for task in listed] == [created["task_id"]]
    assert (tmp_path / ".surehand" / "surehand.sqlite3").is_file()


def test_an_unused_handle_leaves_no_trace_on_disk(tmp_path: Path) -> None:
    Store(sqlite_url(tmp_path / "a" / "b" / "x.sqlite3")).dispose()
    assert list(tmp_path.iterdir()) == []


# -- finding 6: Flower and beat --------------------------------------------------------------


def test_flower_refuses_a_non_loopback_address_without_credentials(tmp_path: Path) -> None:
    refused = surehand(
        tmp_path, "flower", "--host", "0.0.0.0", code=1, SUREHAND_BROKER_URL=UNUSED_REDIS
    )
    assert "refusing to start Flower on 0.0.0.0 without credentials" in refused.stderr
    assert "--basic-auth=user:password or set FLOWER_BASIC_AUTH=user:password" in refused.stderr


def test_flower_credentials_and_the_loopback_api(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FLOWER_BASIC_AUTH", "FLOWER_AUTH", "FLOWER_UNAUTHENTICATED_API"):
        monkeypatch.setenv(name, "")  # recorded, so teardown restores what was there
        monkeypatch.delenv(name)
    _flower_auth("0.0.0.0", ["--basic-auth=admin:pw"])
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "admin:pw")
    _flower_auth("10.0.0.5", [])
    assert "FLOWER_UNAUTHENTICATED_API" not in os.environ  # credentials: Flower asks for them
    monkeypatch.delenv("FLOWER_BASIC_AUTH")
    _flower_auth("127.0.0.1", [])
    assert os.environ["FLOWER_UNAUTHENTICATED_API"] == "true"
    monkeypatch.setenv("FLOWER_UNAUTHENTICATED_API", "false")
    _flower_auth("localhost", [])
    assert os.environ["FLOWER_UNAUTHENTICATED_API"] == "false"  # an explicit choice stands
    with pytest.raises(ConfigError, match="FLOWER_BASIC_AUTH"):
        _flower_auth("192.168.1.2", ["--port=5555"])


@pytest.mark.slow
def test_flower_on_loopback_serves_its_api_without_credentials(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if k.startswith("FLOWER_")}
    assert not base, "the test needs an environment without FLOWER_* settings"
    port = free_port()
    with private_redis(tmp_path) as broker:
        flower = spawn(
            ["flower", "--port", str(port)],
            {"SUREHAND_BROKER_URL": broker.url},
            tmp_path / "flower.log",
        )
        try:
            wait_until(
                lambda: (
                    _answers(f"http://127.0.0.1:{port}/healthcheck")
                    or flower.returncode is not None
                ),
                timeout=60,
                interval=0.2,
                what="Flower to start",
            )
            answer = httpx.get(f"http://127.0.0.1:{port}/api/tasks", timeout=5)
        finally:
            flower.kill(signal.SIGTERM)
    assert answer.status_code == 200, (answer.text, flower.output())
    assert answer.json() == {}


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.slow
def test_beat_keeps_its_schedule_under_surehand_home(tmp_path: Path, store_url: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    home = tmp_path / "home"
    log = tmp_path / "beat.log"
    with private_redis(tmp_path) as broker, log.open("wb") as handle:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SUREHAND_")}
        env |= {
            "SUREHAND_DATABASE_URL": store_url,
            "SUREHAND_BROKER_URL": broker.url,
            "SUREHAND_HOME": str(home),
            "PYTHONUNBUFFERED": "1",
        }
        beat = subprocess.Popen(
            [*SUREHAND, "beat", "--loglevel", "info"],
            env=env,
            cwd=elsewhere,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_until(
                lambda: "beat: Starting" in log.read_text() or beat.poll() is not None,
                timeout=60,
                what="beat",
            )
        finally:
            os.killpg(beat.pid, signal.SIGTERM)
            beat.wait(timeout=30)
    assert [p.name for p in home.glob("celerybeat-schedule*")], log.read_text()
    assert list(elsewhere.iterdir()) == []


def test_compose_workers_run_under_an_init_and_the_guide_says_why() -> None:
    compose = yaml.safe_load((REPO / "compose" / "docker-compose.yml").read_text("utf-8"))
    workers = [name for name in compose["services"] if name.startswith("worker-")]
    assert workers
    for name in workers:
        assert compose["services"][name]["init"] is True, name
    guide = " ".join((REPO / "compose" / "DEPLOYMENT.md").read_text(encoding="utf-8").split())
    assert "Give worker services `init: true` so orphaned processes are reaped" in guide
    assert "`.agent-groups/`" in guide
    assert "## When the configuration is wrong" in guide
    for needle in ("--embedded", "SUREHAND_EMBEDDED=1", "FLOWER_BASIC_AUTH", "createdb"):
        assert needle in guide
