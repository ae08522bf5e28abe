"""The agents' network under real processes: a hostile command agent (tests/hostile_agent.py,
its network probes in tests/hostile_net.py) in the default sandbox of a real ``surehand up``
and a real ``surehand worker`` on this machine's trust-auth Postgres and password-less Redis.

Before issue 29 the default network was the worker's own: from its sandbox the agent reached
the token-less API (and was its local ADMIN), /metrics, Flower, Postgres and Redis on
loopback. Now it reaches none of them, nor an unlisted host, the cloud metadata address or a
private one; a listed destination works through the egress proxy, and a flood of connections
to the session server is held to the session's own cap while a sibling session works.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from surehand.config import Settings
from surehand.facade import Surehand
from surehand.model import Bucket
from surehand.store import Store
from tests.agent_procs import require_proc
from tests.procs import (
    Proc,
    RedisServer,
    free_port,
    private_redis,
    running,
    spawn,
    start_worker,
    wait_until,
)
from tests.session_helpers import attempts_of, read_task, reports_of
from tests.shared.agent_network import Answering
from tests.shared.flower import start_flower
from tests.shared.up import start_up
from tests.shared.workers import worker_env

pytestmark = pytest.mark.slow

AGENT = Path(__file__).parents[1] / "hostile_agent.py"
PROGRAM = f"{sys.executable} {AGENT}"
VIEW = {"SUREHAND_AGENT_BIND": f"{AGENT.parent}:ro"}  # the probes (the sandbox has no checkout)
REFUSED = "refused: ConnectionRefusedError"  # nothing listens on its own loopback
FORBIDDEN = "403 Forbidden"


def hostile(probe: str, **params: Any) -> str:
    return "HOSTILE " + json.dumps({"probe": probe, **params})


def submitted(client: Surehand, body: str) -> str:
    created = client.write_task(sender="PM", recipient="DEV", subject="probe", body=body)
    assert created.task_id is not None
    return created.task_id


def findings(store: Store, task_id: str, proc: Proc, timeout: float = 120) -> dict[str, Any]:
    """The probe's REPORT, once its TASK is in review."""

    def reviewed() -> bool:
        if proc.returncode is not None:
            pytest.fail(f"{proc.log.name} exited:\n{proc.output()[-3000:]}")
        return read_task(store, task_id).bucket is Bucket.REVIEW

    try:
        wait_until(reviewed, timeout=timeout, interval=0.2, what=f"{task_id} in review")
    except pytest.fail.Exception:
        errors = [attempt.error for attempt in attempts_of(store, task_id)]
        pytest.fail(f"{task_id} not in review; its attempts: {errors}\n{proc.output()[-3000:]}")
    [report] = reports_of(store, task_id)
    return dict(json.loads(report.body))


@pytest.fixture
def listed() -> Iterator[tuple[str, str]]:
    """Two destinations an operator lists: one on 127.0.0.2 (reached through the proxy) and one
    on 127.0.0.1 (reached directly, as NO_PROXY says, through its own forward)."""
    servers = [ThreadingHTTPServer((host, 0), Answering) for host in ("127.0.0.2", "127.0.0.1")]
    for server in servers:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tuple(f"{s.server_address[0]!s}:{s.server_address[1]}" for s in servers)  # type: ignore[misc]
    for server in servers:
        server.shutdown()
        server.server_close()


# -- surehand up ------------------------------------------------------------------------------


def test_under_surehand_up_the_agent_reaches_neither_the_api_its_metrics_nor_flower(
    tmp_path: Path,
) -> None:
    require_proc()
    with private_redis(tmp_path) as flower_broker:
        env = {"SUREHAND_BROKER_URL": flower_broker.url, "PYTHONPATH": str(Path.cwd())}
        flower, flower_url = start_flower(env, tmp_path / "flower.log")
        with running(flower):
            up, ready = start_up(
                tmp_path,
                env={"SUREHAND_AGENTS": "DEV=command", "SUREHAND_COMMAND_AGENT": PROGRAM, **VIEW},
            )
            with running(up):
                api = ready["api"].removeprefix("http://")
                flower_at = flower_url.removeprefix("http://")
                sh = Surehand(settings=Settings(home=tmp_path))
                task_id = submitted(
                    sh,
                    hostile(
                        "reach",
                        direct=[api, flower_at],
                        proxied=[
                            f"http://{api}/v1/tasks",
                            f"http://{api}/metrics",
                            f"http://{flower_at}/api/workers",
                            f"connect://{api}",
                        ],
                        fetched=[f"http://{api}/metrics", f"http://{flower_at}/api/workers"],
                    ),
                )
                seen = findings(sh.store, task_id, up)
                log = " ".join(up.output().split())  # its log lines are wrapped

    assert seen["direct"] == {api: REFUSED, flower_at: REFUSED}
    assert set(seen["proxied"].values()) == {FORBIDDEN}
    assert set(seen["fetched"].values()) == {"refused: URLError"}  # 127.0.0.1: NO_PROXY, direct
    assert seen["resolves"] == "refused: gaierror"  # no name resolves inside
    refused = rf"agent egress refused for (\S+ )?{task_id} attempt 1: {re.escape(api)} is not in"
    assert re.search(refused, log), log  # (a rich log line may hold its source in between)
    assert "agent programs: network egress: a namespace of its own" in log


@pytest.mark.parametrize("setting", ["SUREHAND_AGENT_NETWORK=host", "SUREHAND_AGENT_SANDBOX=none"])
def test_surehand_up_refuses_command_agents_on_its_network_beside_a_token_less_api(
    tmp_path: Path, setting: str
) -> None:
    name, _, value = setting.partition("=")
    env = {"SUREHAND_AGENTS": "DEV=command", "SUREHAND_COMMAND_AGENT": PROGRAM, name: value}
    proc = spawn(
        ["up"],
        {"SUREHAND_HOME": str(tmp_path), "SUREHAND_API_PORT": "0", **env},
        tmp_path / "up.log",
    )
    with running(proc):
        wait_until(lambda: proc.returncode is not None, timeout=60, what="up to refuse")

    assert proc.returncode != 0
    assert "an agent would act there as the local ADMIN" in proc.output()


# -- surehand worker ---------------------------------------------------------------------------


def hostile_env(store: Store, broker: RedisServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    """A worker whose DEV agent is the hostile program."""
    agent = {"SUREHAND_AGENTS": "DEV=command", "SUREHAND_COMMAND_AGENT": PROGRAM}
    binds = {"SUREHAND_AGENT_BIND": f"{tmp_path},{AGENT.parent}:ro"}  # tmp_path: worker_env's
    return worker_env(store, broker, tmp_path, **agent, **binds, **extra)


def test_under_a_worker_it_reaches_no_store_redis_metadata_or_private_address_only_the_listed(
    store: Store,
    broker: RedisServer,
    client: Surehand,
    tmp_path: Path,
    listed: tuple[str, str],
) -> None:
    require_proc()
    proxied_at, forwarded_at = listed
    metrics = f"127.0.0.1:{free_port()}"
    env = hostile_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENT_EGRESS=f"{proxied_at},{forwarded_at}",
        SUREHAND_METRICS_PORT=metrics.rpartition(":")[2],
    )
    postgres, shared_redis, leases = "127.0.0.1:5432", "127.0.0.1:6379", f"127.0.0.1:{broker.port}"
    probe = hostile(
        "reach",
        direct=[postgres, shared_redis, leases, metrics, "10.89.0.1:5432"],
        proxied=[
            f"connect://{postgres}",
            f"connect://{leases}",
            "http://169.254.169.254/latest/meta-data/",
            "connect://10.89.0.1:5432",
            "connect://evil.example.net:443",
            f"http://{proxied_at}/through-the-proxy",
        ],
        fetched=[f"http://{proxied_at}/fetched", f"http://{forwarded_at}/forwarded"],
    )
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        task_id = submitted(client, probe)
        seen = findings(store, task_id, worker)
        log = " ".join(worker.output().split())

    assert seen["direct"] == {
        postgres: REFUSED,
        shared_redis: REFUSED,
        leases: REFUSED,
        metrics: REFUSED,
        "10.89.0.1:5432": "refused: OSError",  # no route out of its namespace
    }
    assert seen["proxied"] == {
        f"connect://{postgres}": FORBIDDEN,
        f"connect://{leases}": FORBIDDEN,
        "http://169.254.169.254/latest/meta-data/": FORBIDDEN,
        "connect://10.89.0.1:5432": FORBIDDEN,
        "connect://evil.example.net:443": FORBIDDEN,
        f"http://{proxied_at}/through-the-proxy": "200 OK",
    }
    assert seen["fetched"] == {
        f"http://{proxied_at}/fetched": "200 GET /fetched",
        f"http://{forwarded_at}/forwarded": "200 GET /forwarded",
    }
    names = ["HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY"]
    assert seen["proxy_env"] == sorted([*names, *map(str.lower, names)])
    for refused in ("169.254.169.254:80", "10.89.0.1:5432", "evil.example.net:443", postgres):
        assert f"agent egress refused for {task_id} attempt 1: {refused} is not in" in log


def worker_fds(worker: Proc) -> int:
    return len(os.listdir(f"/proc/{worker.process.pid}/fd"))


@pytest.mark.parametrize("network", ["egress", "host"])
def test_a_connection_flood_on_the_session_server_is_contained_while_a_sibling_works(
    network: str,
    store: Store,
    broker: RedisServer,
    client: Surehand,
    tmp_path: Path,
) -> None:
    """Each half-sent request used to hold a descriptor of the worker for as long as the agent
    liked (1,021 of 1,024 in issue 29). Now a session holds at most SUREHAND_AGENT_CONNECTIONS
    (16 here) and the session server's port twice that for all; heads must come within 10 s."""
    require_proc()
    cap, flooding = 16, tmp_path / "flooding"
    env = hostile_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENT_CONNECTIONS=str(cap),
        SUREHAND_AGENT_NETWORK=network,
    )
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        warm = submitted(client, hostile("calls", times=1))  # the session server is up
        findings(store, warm, worker)
        before = worker_fds(worker)
        flood = submitted(
            client, hostile("connection_flood", count=300, seconds=20, marker=str(flooding))
        )
        wait_until(flooding.exists, timeout=120, what="the flood to be open")
        sibling = submitted(client, hostile("calls", times=3))
        most = before
        while read_task(store, sibling).bucket is not Bucket.REVIEW and worker.returncode is None:
            most = max(most, worker_fds(worker))
            time.sleep(0.2)
        calls = findings(store, sibling, worker)
        flooded = findings(store, flood, worker)

    assert calls == {"effects": ["ran", "ran", "ran"]}
    assert flooded["afterwards"] == "ran"  # its own session still answers after the flood
    # The flood's share: at most its cap of connections (twice that on the shared port), one
    # descriptor each while their heads never end; the sibling's and the worker's own (its
    # session's files, sockets and relays) come and go besides.
    assert most - before < 2 * cap + 48, (before, most)


def test_a_worker_that_cannot_sandbox_refuses_command_agents_until_none_is_chosen(
    store: Store, broker: RedisServer, tmp_path: Path
) -> None:
    """``auto`` used to fall back to ``none`` with a warning in the log, and agents ran
    unconfined (a compose image without bubblewrap did)."""
    env = hostile_env(
        store,
        broker,
        tmp_path,
        PATH=str(tmp_path / "no-bwrap-here"),
    )
    refused = spawn(["worker", "--roles", "DEV"], env, tmp_path / "refused.log")
    with running(refused):
        wait_until(lambda: refused.returncode is not None, timeout=60, what="it to refuse")
    chosen = {**env, "SUREHAND_AGENT_SANDBOX": "none"}
    with running(start_worker(chosen, tmp_path / "none.log")) as worker:
        started = " ".join(worker.output().split())

    assert refused.returncode != 0
    assert "set SUREHAND_AGENT_SANDBOX=none to run them without a sandbox" in " ".join(
        refused.output().split()
    )
    assert "agent programs: sandbox none: process group and subreaper only" in started
    assert "agent programs: network the worker's (SUREHAND_AGENT_SANDBOX=none): WARNING" in started


def test_a_worker_whose_agents_share_its_network_says_so_at_start(
    store: Store, broker: RedisServer, tmp_path: Path
) -> None:
    env = hostile_env(
        store,
        broker,
        tmp_path,
        SUREHAND_AGENT_NETWORK="host",
    )
    with running(start_worker(env, tmp_path / "worker.log")) as worker:
        started = " ".join(worker.output().split())

    assert "agent programs: network host (SUREHAND_AGENT_NETWORK=host): WARNING" in started
    assert "reaches every service on this host's loopback" in started
