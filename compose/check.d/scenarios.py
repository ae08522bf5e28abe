"""compose/check's scenarios, run in order against one stack (issue 23, "Must show"; issue 29
item 2's in sandboxed.py).

Each prints one ``check: <name>: ok (...)`` line with what it measured, or raises CheckFailed;
``main`` tears the stack down whatever happens (``--keep`` leaves it up to look at).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from sandboxed import credentials_required, sandbox_options, sandboxed_agent
from stack import CheckFailed, Stack, say, wait_for

WORKER = "worker-dev"
UP_TIMEOUT = 240.0
FIELDS = {"time", "level", "logger", "message"}  # what a log shipper keys on


def in_review(stack: Stack, task_id: str) -> bool:
    return stack.bucket(task_id) == "review"


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
    young = starting_right_after_start(stack)
    # The API's own check first: it fails until the API listens, seconds after its start.
    seen = {name: watch_health_until_healthy(stack, name) for name in stack.containers("api")}
    wait_for("the API's /healthz", stack.api_up, UP_TIMEOUT, 0.5)
    took["API up"] = time.monotonic() - started
    for name in stack.containers(WORKER) + stack.containers("worker-ops"):
        seen[name] = watch_health_until_healthy(stack, name)
    took["workers up"] = time.monotonic() - started
    for name in stack.containers("beat") + stack.containers("flower"):
        seen[name] = watch_health_until_healthy(stack, name)
    say("up from nothing", ", ".join(f"{k} {v:.1f} s" for k, v in took.items()))
    failed = {name: statuses for name, statuses in seen.items() if statuses}
    say(
        "health tells starting from healthy",
        f"right after start {young}; checks that failed inside the start period left "
        + (
            ", ".join(f"{name} 'starting' ({len(st)} failed)" for name, st in failed.items())
            if failed
            else "nothing to see (each answered its first check)"
        )
        + "; then the API, every worker, beat and Flower healthy",
    )
    return took


def starting_right_after_start(stack: Stack) -> str:
    """Every container with a health check reports ``starting`` before its first check passes
    (podman 4.3 schedules none here, so none has run yet): young, not broken."""
    services = ("api", WORKER, "worker-ops", "beat", "flower")
    statuses = {name: stack.health(name) for s in services for name in stack.containers(s)}
    if set(statuses.values()) != {"starting"}:
        raise CheckFailed(f"right after their start not every container is 'starting': {statuses}")
    return f"{len(statuses)} containers 'starting'"


def watch_health_until_healthy(stack: Stack, name: str) -> list[str]:
    """Run the container's health check until it passes; the status after each one that failed
    (inside the start period a failure must leave it ``starting``, never ``unhealthy``)."""
    after_failures: list[str] = []

    def passes() -> bool:
        if stack.healthy(name):
            return True
        status = stack.health(name)
        after_failures.append(status)
        if status != "starting":
            raise CheckFailed(f"{name} is '{status}' after a failed check in its start period")
        return False

    wait_for(f"{name}'s health check passing", passes, UP_TIMEOUT, 1)
    if stack.health(name) != "healthy":
        raise CheckFailed(f"{name} passed its check but reports '{stack.health(name)}'")
    return after_failures


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
    """Every line every worker, the API and beat wrote to stdout so far is one JSON object with
    the fields a shipper keys on (SUREHAND_LOG_FORMAT=json), but for the known gap below,
    counted and named. On stderr: the CLI's one-line start messages only. Run once early and
    once after everything (restarts, partition, outages). Flower is left out: it logs in plain
    text through its own (tornado's) handlers."""
    found: list[str] = []
    gaps: Counter[str] = Counter()
    for service in (WORKER, "worker-ops", "api", "beat"):
        names = stack.containers(service, running=False)
        lines = 0
        for name in names:
            logs = stack.podman("logs", name)
            parsed, known = json_lines(name, logs.stdout)
            lines += len(parsed)
            gaps.update(known)
            gaps.update(stderr_lines(name, service, logs.stderr))
        found.append(
            f"{service} {lines}" + (f" ({len(names)} containers)" if len(names) > 1 else "")
        )
    say(
        "logs a shipper can parse",
        f"JSON lines on stdout: {', '.join(found)}; plain lines: {dict(gaps)}; Flower plain",
    )


# What the CLI says on stderr as a process starts (err_console), one line each.
START_LINES = (
    "probes registered in this process:",
    "surehand API on ",
    "review console on ",
    "agent programs: ",
)


def stderr_lines(name: str, service: str, text: str) -> Counter[str]:
    """The kinds of plain line on a container's stderr: the CLI's start lines only (surehand's
    own log records go to stdout as JSON, in the API and its publisher process too). Anything
    else fails."""
    kinds: Counter[str] = Counter()
    for line in filter(str.strip, text.splitlines()):
        if not line.startswith(START_LINES):
            raise CheckFailed(f"{name}'s stderr has a line that is no start message: {line!r}")
        kinds["start lines on stderr"] += 1
    return kinds


# Plain lines Celery itself prints on stdout, whatever the log format: a known gap, allowed
# only in this form (any other plain line fails) until surehand silences it: a worker told to
# stop prints "worker: Warm shutdown (MainProcess)" (print, not logging).
WARM_SHUTDOWN = "worker: Warm shutdown (MainProcess)"


def json_lines(
    name: str, text: str, *, lenient: bool = False
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Each non-empty line of ``text`` as a JSON object with the FIELDS, and the known gap
    met (warm-shutdown lines). ``lenient`` skips any other plain
    line instead of failing (to read a log, not to judge its format)."""
    lines = [line for line in text.splitlines() if line.strip()]
    known: Counter[str] = Counter()
    parsed = []
    for line in lines:
        if line == WARM_SHUTDOWN:
            known["warm shutdown lines"] += 1
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if lenient:
                continue
            raise CheckFailed(f"{name}'s stdout has a line that is not JSON: {line!r}") from None
        if not isinstance(record, dict) or not FIELDS.issubset(record):
            raise CheckFailed(f"{name}'s stdout has a record without the usual fields: {line!r}")
        parsed.append(record)
    if not parsed:
        raise CheckFailed(f"{name} wrote no JSON line to stdout")
    return parsed, known


def scale_to_three(stack: Stack) -> list[str]:
    """``--scale worker-dev=3``: three containers answer, and TASKs land on more than one.

    Each idle worker waits in a BRPOP on its queues and Redis hands a message to the client
    that has waited longest, so TASKs submitted one by one go round the containers (prefetch
    is 1 per process slot, and a worker with free slots waits again at once). Six TASKs on at
    least two containers is required; if one container got none, more are submitted, three
    at a time up to six more, until every container ran one: a replica that never takes work
    fails the check."""
    stack.compose("up", "-d", "--no-deps", "--scale", f"{WORKER}=3", WORKER)
    names = stack.containers(WORKER)
    if len(names) != 3:
        raise CheckFailed(f"--scale {WORKER}=3 gave {names}")
    for name in names:
        wait_for(f"{name} answering ping", partial(stack.healthy, name), UP_TIMEOUT, 1)
    hosts = {stack.container_id(name): name for name in names}
    tasks = run_to_review(stack, [f"compose/check: scaled {n} pause=1" for n in range(6)])
    ran_on = Counter(hosts_of(stack, tasks).values())
    if len(ran_on) < 2:
        raise CheckFailed(f"6 TASKs after --scale {WORKER}=3 all ran on {dict(ran_on)}")
    first_six = len(ran_on)
    while set(ran_on) != set(hosts) and len(tasks) < 12:
        more = run_to_review(stack, [f"compose/check: scaled {len(tasks) + n}" for n in range(3)])
        tasks += more
        ran_on.update(hosts_of(stack, more).values())
    if set(ran_on) != set(hosts):
        raise CheckFailed(f"{len(tasks)} TASKs ran on {dict(ran_on)} only, not on all of {hosts}")
    say(
        f"--scale {WORKER}=3",
        f"the first 6 TASKs ran on {first_six} of 3 containers; {len(tasks)} TASKs: "
        + ", ".join(
            f"{hosts[host]} {count}"
            for host, count in sorted(ran_on.items(), key=lambda item: hosts[item[0]])
        ),
    )
    return names


def run_to_review(stack: Stack, subjects: list[str]) -> list[str]:
    tasks = [stack.submit(subject) for subject in subjects]
    for task_id in tasks:
        wait_for(f"{task_id} in review", partial(in_review, stack, task_id), 90)
    return tasks


def hosts_of(stack: Stack, tasks: list[str]) -> dict[str, str]:
    """The container (hostname) that ran each TASK's first effect."""
    return {task_id: stack.ledger(task_id)[0]["host"] for task_id in tasks}


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
    """SIGTERM each worker container in turn while sessions run on it: each stop waits for its
    sessions to finish, or a session cut off anyway is handed over on evidence. Shown per
    stopped worker from the store: every attempt that was running on it at its SIGTERM
    succeeded, or ended and has an interruption case whose admission decided it; and every
    attempt of these TASKs that did not succeed has such a case."""
    tasks: list[str] = []
    stops: list[str] = []
    longest = 0.0
    at_sigterm: dict[str, list[tuple[str, str]]] = {}
    for name in stack.containers(WORKER):
        at_sigterm[name] = sessions_running_on(stack, name, tasks)
        started = time.monotonic()
        stack.podman("stop", "--time", "300", name)
        took = time.monotonic() - started
        longest = max(longest, took)
        stops.append(f"{name} {took:.1f} s with {len(at_sigterm[name])} running")
        stack.podman("start", name)
        wait_for(f"{name} answering ping", partial(stack.healthy, name), UP_TIMEOUT, 1)
    for task_id in tasks:
        wait_for(f"{task_id} in review", partial(in_review, stack, task_id), 120)
        each_effect_once(stack, task_id)
    shown = {task_id: stack.cli("show", task_id) for task_id in tasks}
    ends: Counter[str] = Counter()
    for name, running in at_sigterm.items():
        for task_id, attempt_id in running:
            ends[ended_on_evidence(shown[task_id], attempt_id, name)] += 1
    for found in shown.values():  # and no other attempt ended without its case
        for attempt in found["attempts"]:
            ended_on_evidence(found, attempt["attempt_id"], "any worker")
    states = Counter(a["state"] for found in shown.values() for a in found["attempts"])
    say(
        "rolling restart of the workers",
        f"stops: {'; '.join(stops)}; those sessions: {dict(ends)}; attempts {dict(states)}; "
        f"{len(tasks)} TASKs in review, each effect once",
    )
    return {"longest worker stop": longest}


def sessions_running_on(stack: Stack, name: str, tasks: list[str]) -> list[tuple[str, str]]:
    """Fresh sessions, in a pause long enough to outlast the look, until at least one runs on
    container ``name`` (they go round the containers, as in scale_to_three): three TASKs at a
    time, at most nine. (TASK, attempt) of each attempt running on it now; ``tasks`` gains
    every TASK submitted."""
    host = stack.container_id(name)
    for _ in range(3):
        batch = [stack.submit(f"compose/check: rolling restart, {name} pause=15") for _ in "abc"]
        tasks += batch
        for task_id in batch:
            first_effect_host(stack, task_id)
        running = [
            (task_id, attempt["attempt_id"])
            for task_id in batch
            for attempt in stack.cli("show", task_id)["attempts"]
            if attempt["state"] == "running" and attempt["worker"].split(":")[0] == host
        ]
        if running:
            return running
    raise CheckFailed(f"9 TASKs submitted and none ran on {name} to stop it under")


def ended_on_evidence(shown: dict[str, Any], attempt_id: str, worker: str) -> str:
    """How an attempt ended: ``finished`` (succeeded), or ``handed over (ADMISSION)`` when an
    interruption case for it was decided by admission; CheckFailed for anything else."""
    attempt = next(a for a in shown["attempts"] if a["attempt_id"] == attempt_id)
    if attempt["state"] == "succeeded":
        return "finished"
    case = next((c for c in shown["cases"] if c["interrupted_attempt_id"] == attempt_id), None)
    if case is None or case["admission"] is None:
        raise CheckFailed(
            f"attempt {attempt['number']} of {shown['task']['task_id']} on {worker} ended "
            f"{attempt['state']} without a decided case: {case}"
        )
    return f"handed over ({case['admission']})"


def partition(stack: Stack) -> dict[str, float]:
    """Disconnect a worker container from the network in a session's pause: its lease lapses,
    a successor runs elsewhere; reconnected, the old session's agent (it ignores being stopped)
    tries its late effect and is refused, the session's late end of attempt is fenced in the
    store and recorded once, no effect runs twice, and the worker comes back."""
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
    # The agent tries its late effect a pause after it was told to stop (~pause + TTL after the
    # cut); the session then has max(60 s, 4 TTLs) to reach the store with its end of attempt.
    try:
        late = wait_for(
            f"{task_id}'s late write stopped", partial(late_write, stack, task_id, cut_off), 150
        )
    except CheckFailed as error:
        raise CheckFailed(f"{error}: {late_write_evidence(stack, task_id, cut_off)}") from None
    back = wait_for(f"{cut_off} answering ping again", partial(stack.healthy, cut_off), 120, 2)
    back_after = time.monotonic() - started
    lines = each_effect_once(stack, task_id)  # no late line either
    twice = [
        key
        for key, n in Counter((x["task_id"], x["step"]) for x in stack.ledger()).items()
        if n > 1
    ]
    if twice:
        raise CheckFailed(f"the ledger shows effects applied twice: {twice}")
    shown = stack.cli("show", task_id)
    if shown["task"]["bucket"] != "review":
        raise CheckFailed(f"{task_id} left review after the reconnect: {shown['task']['bucket']}")
    states = [(a["number"], a["state"], a["worker"].split(":")[0]) for a in shown["attempts"]]
    say(
        "a partitioned worker",
        f"{cut_off} cut off; review after {reviewed:.1f} s; attempts {states}; {late}; "
        f"back after {back_after:.0f} s ({back}); "
        f"ledger {[(line['step'], line['host']) for line in lines]}, nothing twice",
    )
    return {"review after partition": reviewed, "partitioned worker back": back_after}


def late_write(stack: Stack, task_id: str, worker: str) -> str | None:
    """What shows the old session was stopped, or None while a piece is missing: its agent's
    late effect refused (the worker's log line), the session's end (its outcome ``stale`` in
    Celery's log line), and in the store exactly one ``stale_owner_fenced`` event, attempt 1's
    under epoch 2: the session's end of attempt, submitted with its old epoch once the store
    is reachable and fenced there (late_writes.py, ``lease_lost``), naming the late effect its
    agent was refused (``refused_after_lease_lost``)."""
    found = late_write_evidence(stack, task_id, worker)
    if len(found["fenced"]) > 1:
        raise CheckFailed(f"{task_id}: {len(found['fenced'])} fenced writes recorded, not one")
    if not (found["fenced"] and found["refused"] and found["ended"]):
        return None
    event = found["fenced"][0]
    data = event.get("data") or {}
    if event.get("epoch") != 1 or data.get("current_epoch") != 2:
        raise CheckFailed(f"{task_id}: the fenced write is not attempt 1's under epoch 2: {event}")
    if str(event.get("by")).split(":")[0] != stack.container_id(worker):
        raise CheckFailed(f"{task_id}: the fenced write is not {worker}'s: {event}")
    if "operation 'ledger.late'" not in (data.get("refused_after_lease_lost") or []):
        raise CheckFailed(f"{task_id}: the fenced end does not name the refused effect: {event}")
    if "'outcome': 'stale'" not in found["ended"][0]:
        raise CheckFailed(f"{task_id}: the old session did not end fenced: {found['ended'][0]}")
    return (
        "its agent's late effect refused on the worker ('ledger.late'); the session's "
        f"{data.get('write')} by epoch 1 on that worker fenced in the store under epoch 2 "
        "(one event, naming the refused effect); its session ended 'stale'"
    )


def late_write_evidence(stack: Stack, task_id: str, worker: str) -> dict[str, list[Any]]:
    """The pieces :func:`late_write` looks for, as found now."""
    history = stack.cli("show", task_id)["history"]
    records, _ = json_lines(worker, stack.podman("logs", worker).stdout, lenient=True)
    messages = [str(record["message"]) for record in records]
    refusal = f"operation 'ledger.late' refused: the session of {task_id} lost its lease"
    return {
        "fenced": [event for event in history if event["kind"] == "stale_owner_fenced"],
        "refused": [m for m in messages if refusal in m],
        "ended": [
            m
            for m in messages
            if m.startswith("Task surehand.run_session[")
            and " succeeded in " in m
            and f"'task_id': '{task_id}'" in m
        ],
    }


def redis_restart_is_health(stack: Stack) -> dict[str, float]:
    """Stop Redis with sessions running: a worker's health check turns unhealthy (broken, not
    starting: its start period is over); TASKs submitted over HTTP while it is down get a
    retryable answer (retried with the same Idempotency-Key) or are created; start it: healthy
    again, and every TASK submitted around the restart reaches review once, with each effect
    once, and the TASK list holds exactly the TASKs submitted (none lost, none twice)."""
    marker = f"redis-restart-{int(time.time())}"
    tasks = [stack.submit(f"compose/check: {marker} {n} pause=4") for n in range(4)]
    first_effect_host(stack, tasks[0])
    redis = stack.containers("redis")[0]
    worker = stack.containers(WORKER)[0]
    stack.podman("stop", "--time", "10", redis)
    down = time.monotonic()
    answers: Counter[str] = Counter()
    for n in range(3):
        task_id, before = stack.submit_retrying(f"compose/check: {marker} down {n}", 120)
        tasks.append(task_id)
        answers.update([*before, "created"])
    submitted = time.monotonic() - down
    # Failures inside the start period do not count: a young container stays as it was.
    broken = wait_for(f"{worker} unhealthy", partial(turns_unhealthy, stack, worker), 150)
    stack.podman("start", redis)
    wait_for(f"{worker} healthy again", partial(stack.healthy, worker), UP_TIMEOUT, 2)
    all_once(stack, tasks)
    found = stack.tasks_with(marker)
    if found != sorted(tasks):
        raise CheckFailed(f"TASKs after the Redis restart: {found}, submitted {sorted(tasks)}")
    say(
        "health tells broken from starting",
        f"Redis stopped: {worker} {broken}; 3 TASKs submitted while it was down in "
        f"{submitted:.2f} s (answers {dict(answers)}); restarted: healthy; all "
        f"{len(tasks)} TASKs listed once and in review, effects once",
    )
    return {"submits while Redis was down": submitted}


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
    found = stack.tasks_with(marker)
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
    ("credentials", credentials_required),
    ("sandbox-options", sandbox_options),
    ("logs", logs_are_json),
    ("scale", scale_to_three),
    ("kill", kill_a_worker),
    ("rolling", rolling_restart),
    ("partition", partition),
    ("redis", redis_restart_is_health),
    ("postgres", postgres_restart),
    ("sandbox", sandboxed_agent),
    ("logs", logs_are_json),  # again: every line of the whole run
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
    for service in ("migrate", "api", WORKER, "worker-ops", "beat"):
        for name in stack.containers(service, running=False):
            tail = stack.podman("logs", "--tail", "15", name, check=False)
            print(f"--- {name}\n{tail.stdout}{tail.stderr}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
