"""compose/check's scenarios, run in order against one stack (issue 23, "Must show").

Each prints one ``check: <name>: ok (...)`` line with what it measured, or raises CheckFailed;
``main`` tears the stack down whatever happens (``--keep`` leaves it up to look at).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from stack import CheckFailed, Stack, wait_for

WORKER = "worker-dev"
UP_TIMEOUT = 240.0


def in_review(stack: Stack, task_id: str) -> bool:
    return stack.bucket(task_id) == "review"


def say(name: str, detail: str) -> None:
    print(f"check: {name}: ok ({detail})", flush=True)


def come_up(stack: Stack) -> dict[str, float]:
    """From nothing to a stack whose API answers and whose workers answer a ping, in the order
    of the compose file's depends_on conditions (see stack.py for why by hand)."""
    started = time.monotonic()
    took: dict[str, float] = {}
    stack.compose("up", "-d", "--no-deps", "postgres", "redis")
    for service in ("postgres", "redis"):
        name = stack.containers(service)[0]
        wait_for(f"{service} healthy", partial(stack.healthy, name), UP_TIMEOUT, 0.5)
    took["services healthy"] = time.monotonic() - started
    migrated = stack.compose("up", "--no-deps", "migrate")
    if "upgraded from" not in migrated.stdout:
        raise CheckFailed(f"migrate did not upgrade a new database: {migrated.stdout[-400:]}")
    took["migrated"] = time.monotonic() - started
    stack.compose("up", "-d", "--no-deps", "api", WORKER, "worker-ops", "beat", "flower")
    wait_for("the API's /healthz", stack.api_up, UP_TIMEOUT, 0.5)
    took["API up"] = time.monotonic() - started
    for name in stack.containers(WORKER) + stack.containers("worker-ops"):
        wait_for(f"{name} answering ping", partial(stack.healthy, name), UP_TIMEOUT, 1)
    took["workers up"] = time.monotonic() - started
    say("up from nothing", ", ".join(f"{k} {v:.1f} s" for k, v in took.items()))
    return took


def migrations_once(stack: Stack) -> None:
    """The one-shot migration job run again finds its work done."""
    again = stack.compose("run", "--rm", "--no-deps", "migrate")
    if "done already" not in again.stdout:
        raise CheckFailed(f"a second migrate run did not find the work done: {again.stdout}")
    say("migrations are a one-shot job", "a second run: 'done already'")


def task_to_review(stack: Stack) -> str:
    """A TASK submitted over HTTP runs on a worker container and reaches review."""
    started = time.monotonic()
    task_id = stack.submit("compose/check: first TASK pause=1")
    wait_for(f"{task_id} in review", lambda: stack.bucket(task_id) == "review", 60)
    took = time.monotonic() - started
    hosts = {stack.container_id(name): name for name in stack.containers(WORKER)}
    attempts = stack.cli("show", task_id)["attempts"]
    ran_on = attempts[0]["worker"].split(":")[0]
    if ran_on not in hosts:
        raise CheckFailed(f"{task_id} ran on {ran_on}, not a {WORKER} container {sorted(hosts)}")
    say("TASK over HTTP to review", f"{task_id} on {hosts[ran_on]} in {took:.1f} s")
    return task_id


def flower_lists(stack: Stack, task_id: str) -> None:
    def listed() -> bool:
        return any(
            entry.get("name") == "surehand.run_session" and task_id in str(entry.get("args"))
            for entry in stack.flower_tasks().values()
        )

    wait_for(f"Flower listing {task_id}'s session", listed, 60, 2)
    say("Flower lists the session", f"surehand.run_session('{task_id}') in /api/tasks")


def logs_are_json(stack: Stack) -> None:
    """Every line a worker wrote to stdout is one JSON object (SUREHAND_LOG_FORMAT=json)."""
    import json

    name = stack.containers(WORKER)[0]
    lines = stack.podman("logs", name).stdout.splitlines()
    parsed = [json.loads(line) for line in lines if line.strip()]
    if not parsed or not all({"time", "level", "logger", "message"} <= set(p) for p in parsed):
        raise CheckFailed(f"{name}'s stdout is not one JSON object per line")
    say("logs a shipper can parse", f"{len(parsed)} JSON lines on {name}'s stdout")


def scale_to_three(stack: Stack) -> list[str]:
    stack.compose("up", "-d", "--no-deps", "--scale", f"{WORKER}=3", WORKER)
    names = stack.containers(WORKER)
    if len(names) != 3:
        raise CheckFailed(f"--scale {WORKER}=3 gave {names}")
    for name in names:
        wait_for(f"{name} answering ping", partial(stack.healthy, name), UP_TIMEOUT, 1)
    tasks = [stack.submit(f"compose/check: scaled {n} pause=1") for n in range(6)]
    for task_id in tasks:
        wait_for(f"{task_id} in review", partial(in_review, stack, task_id), 90)
    hosts = {line["host"] for t in tasks for line in stack.ledger(t)}
    say(f"--scale {WORKER}=3", f"{', '.join(names)}; 6 TASKs ran on {len(hosts)} of them")
    return names


def first_effect_host(stack: Stack, task_id: str, timeout: float = 90) -> str:
    """The container hostname that ran the TASK's first effect (the session is in its pause)."""
    lines = wait_for(f"{task_id}'s first effect", lambda: stack.ledger(task_id), timeout, 0.5)
    host: str = lines[0]["host"]
    return host


def name_of(stack: Stack, host: str) -> str:
    for name in stack.containers(WORKER, running=False):
        if stack.container_id(name) == host:
            return name
    raise CheckFailed(f"no {WORKER} container has hostname {host}")


def each_effect_once(stack: Stack, task_id: str) -> list[dict[str, Any]]:
    lines = stack.ledger(task_id)
    counts = Counter(line["step"] for line in lines)
    if counts != Counter(first=1, second=1):
        raise CheckFailed(f"{task_id}: the ledger shows {dict(counts)}, not each effect once")
    return lines


def kill_a_worker(stack: Stack) -> dict[str, float]:
    """podman kill the worker container in a session's pause: the attempt is SESSION_LOST, a
    successor runs on another container, the ledger shows each effect once."""
    if len(stack.containers(WORKER)) < 2:  # the successor needs another container
        scale_to_three(stack)
    task_id = stack.submit("compose/check: killed mid-session pause=60")
    host = first_effect_host(stack, task_id)
    victim = name_of(stack, host)
    killed = time.monotonic()
    stack.podman("kill", victim)
    stack.podman("stop", "--time", "0", victim)  # and keep it down: a host that is gone

    def lost() -> dict[str, Any] | None:
        attempts = stack.cli("show", task_id)["attempts"]
        return next((a for a in attempts if a["state"].lower() == "session_lost"), None)

    lost_attempt = wait_for(f"{task_id}'s attempt SESSION_LOST", lost, 120, 1)
    detected = time.monotonic() - killed
    wait_for(f"{task_id} in review", lambda: stack.bucket(task_id) == "review", 120)
    reviewed = time.monotonic() - killed
    lines = each_effect_once(stack, task_id)
    second = next(line for line in lines if line["step"] == "second")
    if second["host"] == host:
        raise CheckFailed(f"{task_id}'s successor ran on the killed container {victim}")
    stack.podman("start", victim)
    say(
        "a killed worker container",
        f"{victim} killed; {lost_attempt['state']} after {detected:.1f} s, successor on "
        f"{name_of(stack, second['host'])}, review after {reviewed:.1f} s; each effect once",
    )
    return {"lost detected": detected, "review after kill": reviewed}


def rolling_restart(stack: Stack) -> dict[str, float]:
    """SIGTERM each worker container in turn while sessions run: each stop waits for its
    sessions to finish (or hands them over on evidence), the next starts when it is back."""
    tasks = [stack.submit(f"compose/check: rolling restart {n} pause=6") for n in range(3)]
    for task_id in tasks:
        first_effect_host(stack, task_id)
    stops = []
    for name in stack.containers(WORKER):
        started = time.monotonic()
        stack.podman("stop", "--time", "300", name)
        stops.append(time.monotonic() - started)
        stack.podman("start", name)
        wait_for(f"{name} answering ping", partial(stack.healthy, name), UP_TIMEOUT, 1)
    for task_id in tasks:
        wait_for(f"{task_id} in review", partial(in_review, stack, task_id), 120)
        each_effect_once(stack, task_id)
    states = Counter(
        attempt["state"] for task_id in tasks for attempt in stack.cli("show", task_id)["attempts"]
    )
    say(
        "rolling restart of the workers",
        f"stops took {', '.join(f'{s:.1f}' for s in stops)} s; attempts {dict(states)}; "
        "3 TASKs in review, each effect once",
    )
    return {"longest worker stop": max(stops)}


def partition(stack: Stack) -> dict[str, float]:
    """Disconnect a worker container from the network in a session's pause: its lease lapses,
    a successor runs elsewhere; reconnected, the old session's late write (its agent ignores
    being stopped) is fenced and recorded, its effect never runs, the worker comes back."""
    network = f"{stack.project}_default"
    if len(stack.containers(WORKER)) < 2:
        scale_to_three(stack)
    pause = 40
    task_id = stack.submit(f"compose/check: partitioned mid-session, stubborn pause={pause}")
    host = first_effect_host(stack, task_id)
    cut_off = name_of(stack, host)
    started = time.monotonic()
    stack.podman("network", "disconnect", network, cut_off)
    try:
        wait_for(f"{task_id} in review", partial(in_review, stack, task_id), pause - 5, 1)
        reviewed = time.monotonic() - started
    finally:
        stack.podman("network", "connect", network, cut_off)
    late = wait_for(
        f"{task_id}'s late write stopped", partial(late_write, stack, task_id, cut_off), 90
    )
    back = wait_for(f"{cut_off} answering ping again", partial(stack.healthy, cut_off), 120, 2)
    back_after = time.monotonic() - started
    lines = each_effect_once(stack, task_id)  # no late line either
    shown = stack.cli("show", task_id)
    if shown["task"]["bucket"] != "review":
        raise CheckFailed(f"{task_id} left review after the reconnect: {shown['task']['bucket']}")
    states = [(a["number"], a["state"], a["worker"].split(":")[0]) for a in shown["attempts"]]
    say(
        "a partitioned worker",
        f"{cut_off} cut off; review after {reviewed:.1f} s; attempts {states}; late write: "
        f"{late}; back after {back_after:.0f} s ({back}); "
        f"ledger {[(line['step'], line['host']) for line in lines]}",
    )
    return {"review after partition": reviewed, "partitioned worker back": back_after}


def late_write(stack: Stack, task_id: str, worker: str) -> str | None:
    """The old session's late write, fenced in the store: its ``stale_owner_fenced`` event
    (the write, the stale epoch and the current one), or None while there is none. The
    session knows it lost its lease and its agent's late effect is refused, but it still
    submits the end of its attempt with its old epoch once the store is reachable, so the
    store, the authority, fences it and records that it did."""
    history = stack.cli("show", task_id)["history"]
    fenced = [event for event in history if event["kind"] == "stale_owner_fenced"]
    if not fenced:
        return None
    if len(fenced) != 1:
        raise CheckFailed(f"{task_id}: {len(fenced)} fenced writes recorded, expected one")
    event = fenced[0]
    data = event.get("data") or {}
    if event.get("epoch") != 1 or data.get("current_epoch") != 2:
        raise CheckFailed(f"{task_id}: the fenced write is not attempt 1's under epoch 2: {event}")
    refused = any(
        task_id in line and "refused: the session" in line
        for line in stack.podman("logs", worker).stdout.splitlines()
    )
    agent = "its agent's late effect refused" if refused else "no late effect tried"
    return f"{data.get('write')} by epoch 1 fenced in the store under epoch 2; {agent}"


def redis_restart_is_health(stack: Stack) -> None:
    """Stop Redis with sessions running: a worker's health check turns unhealthy (broken, not
    starting: its start period is over); start it: healthy again, and every TASK submitted
    around the restart reaches review with each effect once."""
    tasks = [stack.submit(f"compose/check: Redis restart {n} pause=4") for n in range(4)]
    first_effect_host(stack, tasks[0])
    redis = stack.containers("redis")[0]
    worker = stack.containers(WORKER)[0]
    stack.podman("stop", "--time", "10", redis)
    # Failures inside the start period do not count: a young container stays as it was.
    broken = wait_for(f"{worker} unhealthy", partial(turns_unhealthy, stack, worker), 150)
    stack.podman("start", redis)
    wait_for(f"{worker} healthy again", partial(stack.healthy, worker), UP_TIMEOUT, 2)
    all_once(stack, tasks)
    say(
        "health tells broken from starting",
        f"Redis stopped: {worker} {broken}; restarted: healthy; 4 TASKs in review, effects once",
    )


def turns_unhealthy(stack: Stack, name: str) -> str | None:
    stack.healthy(name)
    status = stack.health(name)
    return status if status == "unhealthy" else None


def postgres_restart(stack: Stack) -> dict[str, float]:
    """Restart Postgres with sessions running: no TASK lost, none duplicated, effects once."""
    marker = f"pg-restart-{int(time.time())}"
    tasks = [stack.submit(f"compose/check: {marker} {n} pause=4") for n in range(4)]
    first_effect_host(stack, tasks[0])
    started = time.monotonic()
    stack.podman("restart", "--time", "10", stack.containers("postgres")[0])
    all_once(stack, tasks)
    took = time.monotonic() - started
    listed = stack.api("GET", "/v1/tasks?limit=100")["tasks"]
    found = sorted(t["task_id"] for t in listed if marker in t["subject"])
    if found != sorted(tasks):
        raise CheckFailed(f"TASKs after the Postgres restart: {found}, submitted {tasks}")
    say("a Postgres restart under load", f"4 TASKs in review {took:.1f} s later, effects once")
    return {"review after Postgres restart": took}


def all_once(stack: Stack, tasks: list[str]) -> None:
    for task_id in tasks:
        try:
            wait_for(f"{task_id} in review", partial(in_review, stack, task_id), 180, 2)
        except CheckFailed as error:
            shown = stack.cli("show", task_id)
            attempts = [(a["number"], a["state"], a["worker"]) for a in shown["attempts"]]
            raise CheckFailed(f"{error}: {shown['task']['bucket']}, attempts {attempts}") from None
        each_effect_once(stack, task_id)


SCENARIOS: list[tuple[str, Callable[[Stack], Any]]] = [
    ("migrations", migrations_once),
    ("logs", logs_are_json),
    ("scale", scale_to_three),
    ("kill", kill_a_worker),
    ("rolling", rolling_restart),
    ("partition", partition),
    ("redis", redis_restart_is_health),
    ("postgres", postgres_restart),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--podman-compose", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--project", default="surehand-check")
    parser.add_argument("--keep", action="store_true", help="leave the stack up afterwards")
    parser.add_argument("--only", default="", help="comma list of scenarios after the first TASK")
    args = parser.parse_args()
    stack = Stack(args.project, args.podman_compose, args.workdir)
    stack.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    stack.ledger_path.parent.chmod(0o777)  # the workers run as uid 10001
    stack.teardown()  # leftovers of an interrupted run
    started = time.monotonic()
    numbers: dict[str, float] = {}
    failed = False
    try:
        numbers.update(come_up(stack))
        flower_lists(stack, task_to_review(stack))
        wanted = {name for name in args.only.split(",") if name}
        for name, scenario in SCENARIOS:
            if not wanted or name in wanted:
                found = scenario(stack)
                numbers.update(found if isinstance(found, dict) else {})
    except Exception as error:  # any failure: report it, dump the logs, tear down
        failed = True
        print(f"check: FAILED: {error}", file=sys.stderr, flush=True)
        dump_logs(stack)
    finally:
        if not args.keep:
            stack.teardown()
    numbers["scenarios"] = time.monotonic() - started
    print("check: numbers: " + ", ".join(f"{k} {v:.1f} s" for k, v in numbers.items()))
    return 1 if failed else 0


def dump_logs(stack: Stack) -> None:
    for service in ("migrate", "api", WORKER, "beat"):
        for name in stack.containers(service, running=False):
            tail = stack.podman("logs", "--tail", "15", name, check=False)
            print(f"--- {name}\n{tail.stdout}{tail.stderr}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
