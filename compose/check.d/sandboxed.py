"""compose/check's scenarios for the deployment's own doors (issue 29, item 2): Postgres and
Redis refuse clients without their passwords, the worker containers' agents run in bubblewrap
sandboxes (the engine options the compose file gives a worker are what bwrap needs, and a
worker without them refuses to start), and an agent in a worker container reaches none of
Postgres, Redis, the API, Flower or its worker's metrics port, nor reads the worker's secrets,
while its TASK completes.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
from functools import partial
from pathlib import Path
from typing import Any

from stack import CheckFailed, Stack, say, wait_for

PROBE_WORKER = "worker-ops"  # QA is the probe's role (stack.py's SUREHAND_AGENTS)
START = "agent programs: sandbox "
MARKER = "surehand-check-probe: "  # probe_agent.py's report line
# The engine options docker-compose.yml gives the workers (x-agent-sandbox), as podman run
# options; tests/project/test_compose.py holds them equal to the file's.
COMPOSE_OPTIONS = (
    "--security-opt=seccomp=unconfined",
    "--security-opt=apparmor=unconfined",
    "--security-opt=systempaths=unconfined",
    "--security-opt=no-new-privileges:true",
    "--cap-drop=ALL",
)
# podman's narrowest set that works (compose/DEPLOYMENT.md): its own seccomp profile allows
# the namespace calls, and only /proc's masked and read-only parts stand in the way.
PODMAN_NARROW = (
    "--security-opt=unmask=/proc/*",
    "--security-opt=no-new-privileges:true",
    "--cap-drop=ALL",
)
CONTAINERS_SECCOMP = Path("/usr/share/containers/seccomp.json")
# The settings under which `surehand check` and `surehand worker` judge the sandbox.
COMMAND_AGENT = (
    "SUREHAND_AGENTS=QA=command",
    "SUREHAND_COMMAND_AGENT=true",
    "SUREHAND_AGENT_SANDBOX=bwrap",
)


# -- credentials ---------------------------------------------------------------------------

CLIENTS = """
import json, os, psycopg, redis
def attempt(connect):
    try:
        connect()
        return "accepted"
    except Exception as error:
        said = str(error).strip().splitlines()[-1].rsplit(":  ", 1)[-1].rsplit(": ", 1)[-1]
        return f"{type(error).__name__} ({said[:50]})"
pg = "host=postgres dbname=surehand connect_timeout=3 user="
url = os.environ["SUREHAND_DATABASE_URL"].replace("+psycopg", "")
found = {
    "redis, no password": attempt(lambda: redis.Redis(host="redis", socket_timeout=3).ping()),
    "redis, a wrong one": attempt(
        lambda: redis.Redis(host="redis", password="wrong", socket_timeout=3).ping()),
    "redis, the stack's": attempt(
        lambda: redis.Redis.from_url(os.environ["SUREHAND_REDIS_URL"], socket_timeout=3).ping()),
    "postgres, no password": attempt(lambda: psycopg.connect(pg + "surehand").close()),
    "postgres superuser, no password": attempt(lambda: psycopg.connect(pg + "postgres").close()),
    "postgres, a wrong one": attempt(
        lambda: psycopg.connect(pg + "surehand password=wrong").close()),
    "postgres, the stack's": attempt(lambda: psycopg.connect(url, connect_timeout=3).close()),
}
print(json.dumps(found))
"""


def credentials_required(stack: Stack) -> None:
    """From the compose network (the API container, which has both clients): Redis and
    Postgres refuse a client with no password or a wrong one, and take the stack's."""
    api = stack.containers("api")[0]
    done = stack.podman("exec", "-e", "PGPASSFILE=/dev/null", api, "python", "-c", CLIENTS)
    found: dict[str, str] = json.loads(done.stdout)
    wrong = {
        who: answer
        for who, answer in found.items()
        if (answer == "accepted") != who.endswith("the stack's")
    }
    if wrong:
        raise CheckFailed(f"credentials: {wrong} (all answers: {found})")
    refused = "; ".join(f"{who}: {answer}" for who, answer in found.items() if answer != "accepted")
    say("Postgres and Redis require their passwords", f"{refused}; the stack's accepted")


# -- the engine options --------------------------------------------------------------------


def sandbox_verdict(stack: Stack, options: tuple[str, ...]) -> str:
    """What `surehand check` says of the bwrap sandbox in a worker image container started
    with ``options``: ``bwrap: ...`` when it works, else why not."""
    env = [f"--env={item}" for item in COMMAND_AGENT]
    done = stack.podman(
        "run", "--rm", *options, *env, image(), "surehand", "check", "--json", check=False
    )
    try:
        checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    except (ValueError, KeyError):
        raise CheckFailed(f"surehand check in the worker image: {done.stderr[-600:]}") from None
    found = checks.get("agent sandbox") or checks.get("agent programs")
    if found is None:
        raise CheckFailed(f"surehand check says nothing of the sandbox: {sorted(checks)}")
    return str(found["detail"]) if found["status"] == "ok" else f"refused: {found['detail']}"


def image() -> str:
    return os.environ.get("IMAGE", "localhost/surehand:local")


def sandbox_options(stack: Stack) -> None:
    """The worker image under different engine options, judged by `surehand check` (the
    trial a worker makes at start): the compose file's options let bwrap run; each relaxation
    podman needs is needed (without the /proc unmasking it is refused); podman's narrower set
    works too; and a worker started without any refuses to start, naming the setting."""
    without_proc = tuple(o for o in COMPOSE_OPTIONS if "systempaths" not in o)
    cases: list[tuple[str, tuple[str, ...], bool]] = [
        ("the compose file's", COMPOSE_OPTIONS, True),
        ("the compose file's without systempaths=unconfined", without_proc, False),
        ("podman's narrower set (unmask=/proc/*)", PODMAN_NARROW, True),
        ("none", (), False),
    ]
    if CONTAINERS_SECCOMP.exists():
        profile = f"--security-opt=seccomp={CONTAINERS_SECCOMP}"
        narrowed = tuple(profile if "seccomp=" in o else o for o in COMPOSE_OPTIONS)
        what = f"the compose file's with WORKER_SECCOMP={CONTAINERS_SECCOMP}"
        cases.insert(1, (what, narrowed, True))
    shown = []
    for what, options, works in cases:
        verdict = sandbox_verdict(stack, options)
        if verdict.startswith("bwrap:") != works:
            raise CheckFailed(f"worker image with {what} options: {verdict}")
        why = verdict.split("bwrap fails here: ", 1)[-1].split(";")[0].split(": command")[0]
        shown.append(f"{what}: {'bwrap' if works else 'refused, ' + why}")
    refusal = worker_without_options(stack)
    say("the workers' engine options", "; ".join(shown) + f"; a worker without them: {refusal}")


def worker_without_options(stack: Stack) -> str:
    """`surehand worker` for a command agent in a container without the options stops at
    start with one line naming SUREHAND_AGENT_SANDBOX (never runs its agents unconfined)."""
    services = ("SUREHAND_BROKER_URL=redis://nowhere:6379/0", "SUREHAND_REDIS_URL=redis://nowhere")
    env = [f"--env={item}" for item in (*COMMAND_AGENT, *services)]
    argv = ("surehand", "worker", "--roles", "QA")
    done = stack.podman("run", "--rm", *env, image(), *argv, check=False)
    said = (done.stdout + done.stderr).strip()
    if done.returncode == 0 or "SUREHAND_AGENT_SANDBOX=bwrap, but" not in said:
        raise CheckFailed(f"a worker without the sandbox options: exit {done.returncode}: {said}")
    return f"exit {done.returncode}, {said.splitlines()[-1][:100]!r}"


# -- the sandboxed agent -------------------------------------------------------------------


def start_lines(stack: Stack, name: str) -> list[str]:
    return [line for line in stack.podman("logs", name).stderr.splitlines() if START in line]


def targets(stack: Stack) -> str:
    """What the probe tries, as ``label@host:port,...``: each door by service name and by
    address, and the worker's metrics port on its loopback and its address."""
    worker = stack.containers(PROBE_WORKER)[0]
    doors = {"postgres": 5432, "redis": 6379, "api": 8000, "flower": 5555}
    found = [f"{service}@{service}:{port}" for service, port in doors.items()]
    found += [
        f"{service}@{stack.address(stack.containers(service)[0])}:{port}"
        for service, port in doors.items()
    ]
    found += ["metrics@127.0.0.1:9100", f"metrics@{stack.address(worker)}:9100"]
    return ",".join(found)


def probe_report(body: str) -> dict[str, Any]:
    line = next((line for line in body.splitlines() if line.startswith(MARKER)), None)
    if line is None:
        raise CheckFailed(f"the probe's REPORT has no result line: {body[-400:]!r}")
    found: dict[str, Any] = json.loads(line.removeprefix(MARKER))
    return found


def last_report(stack: Stack, task_id: str) -> str | None:
    """The body of the TASK's last REPORT; None while the API answers 5xx."""
    try:
        reports = stack.api("GET", f"/v1/tasks/{task_id}/reports")["reports"]
    except urllib.error.HTTPError as error:
        if error.code < 500:
            raise
        return None
    body: str = reports[-1]["body"]
    return body


def control(stack: Stack, spec: str) -> dict[str, Any]:
    """The probe run in the worker container itself, outside any sandbox: every target is
    there to be reached, and the worker's secrets are in sight (else the probe's silence in
    the sandbox would show nothing)."""
    worker = stack.containers(PROBE_WORKER)[0]
    done = stack.podman("exec", worker, "python", "/opt/check/probe_agent.py", "--targets", spec)
    found = probe_report(done.stdout)
    missed = [name for name, seen in found["targets"].items() if not seen["reached"]]
    if missed or not found["secrets"]:
        raise CheckFailed(f"the control from {worker} itself: unreached {missed}, {found}")
    return found


def sandboxed_agent(stack: Stack) -> dict[str, float]:
    """A worker container's agent runs sandboxed (its worker's start line says bwrap) and,
    while its TASK completes, reaches none of the targets (directly or through the sandbox's
    proxy) and sees no process that holds a secret."""
    names = stack.containers(PROBE_WORKER)
    lines = {name: start_lines(stack, name) for name in names}
    unconfined = {
        name: found
        for name, found in lines.items()
        if not found or not found[0].startswith(START + "bwrap")
    }
    if unconfined:
        raise CheckFailed(f"{PROBE_WORKER} does not sandbox its agents: {unconfined}")
    spec = targets(stack)
    outside = control(stack, spec)
    started = time.monotonic()
    # Retried as a client is told to: a 503 right after the Postgres restart is retryable.
    task_id, _ = stack.submit_retrying(f"compose/check: probe targets={spec}", 60, "QA")
    wait_for(f"{task_id} in review", lambda: stack.bucket(task_id) == "review", 120)
    took = time.monotonic() - started
    inside = probe_report(wait_for(f"{task_id}'s REPORT", partial(last_report, stack, task_id), 30))
    reached = {name: seen for name, seen in inside["targets"].items() if seen["reached"]}
    worker_seen = [p for p in inside["processes"] if "surehand worker" in p or "celery" in p]
    found = (
        f"start line {lines[names[0]][0][len(START) :][:60]!r}...; secrets in sight: "
        f"{inside['secrets'] or 'none'} (the worker's own container: {len(outside['secrets'])} "
        f"processes'); processes in sight {len(inside['processes'])}; proxy {inside['proxy']}"
    )
    if inside["secrets"] or worker_seen or reached:
        raise CheckFailed(
            f"{task_id}'s sandboxed agent reached {sorted(reached)} ({reached}); worker "
            f"processes in sight {worker_seen}; {found}"
        )
    say(
        "a worker container's agent is sandboxed",
        f"{task_id} in review after {took:.1f} s; none of {len(inside['targets'])} targets "
        f"reached (all {len(outside['targets'])} reached from its worker); {found}",
    )
    return {"sandboxed probe to review": took}
