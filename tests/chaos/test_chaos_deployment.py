"""Chaos on a real deployment: TASKs whose agents write intents and outcomes run on real
``surehand worker`` processes while the test SIGKILLs workers, restarts Redis and terminates every
Postgres connection, in rounds (DESIGN.md section 10; issue 10, "Must show").

The deployment: three ``surehand worker --roles DEV`` (one session at a time each), one
``surehand worker --roles OPS`` that in practice runs only the reconcile passes (as compose's
worker-ops does next to worker-dev; idle DEV workers run some too), one ``surehand beat``
scheduling them, one private ``redis-server`` (broker and leases, no persistence: a restart loses
every lease and queued message) and the test run's throwaway Postgres database. Settings are
those of ``test_chaos.py``: lease TTL 1 s, heartbeat 0.3 s, lost grace 0.5 s, reconcile interval
0.5 s; an inbox TASK whose message a restart dropped is published again after 2 s.

Every TASK runs ``tests.chaos_agents:mixed_effects`` with a plan that mixes an unkeyed effect
(neither key nor probe), a keyed effect and effect-free work; each effect appends a line to a
ledger file before its reply takes 0.25 s, so the effects are counted outside surehand's records
and a cut session often leaves an open intent whose effect ran.

Each round submits more TASKs (a submission that meets a dropped connection is retried with its
id), SIGKILLs a DEV worker and starts another (a random one; in every second round one caught
between an effect and its outcome, so that the hold path is taken), restarts Redis, and runs
``pg_terminate_backend`` on every backend of the database but the test's own. Then, once nothing
is in motion (bounded wait), the store and the ledger must show:

  - 0 duplicate TASKs (one per submission id);
  - 0 TASKs stranded in ``active`` with no running attempt, no open case and no hold;
  - 0 unkeyed effects run twice, and every repeat of a keyed effect with its first key;
  - every open intent whose effect ran (ledger: ran; store: intent) held for review;
  - nothing still in motion (in ``inbox``, running, or admitted without its successor).

And the faults took effect and work got done (a run where every session failed would pass the
checks above: a failed agent's TASK is held, neither stranded nor moving):

  - at least one kill landed inside an effect (counted: a random kill does not count);
  - ``pg_terminate_backend`` terminated at least one backend;
  - TASKs reached review, effects ran, and a TASK whose agent failed transiently (a ``flaky``
    step fails its first attempt, as on a model API's 529) reached review by automatic retries;
  - no TASK is held but on an open intent (a transient failure is never held for a person);
  - at least one open intent whose effect ran was held, and a review releases that hold.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Connection, create_engine, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from surehand.agents.context import SessionContext
from surehand.errors import StoreUnavailable
from surehand.model import (
    Admission,
    Attempt,
    AttemptCause,
    AttemptState,
    Bucket,
    CaseState,
    InterruptionCase,
    Operation,
    OperationState,
    Task,
    TaskEvent,
)
from surehand.store import Store
from surehand.store import attempts as attempt_rows
from surehand.store import cases as case_rows
from surehand.store import events as event_rows
from surehand.store import operations as operation_rows
from surehand.store import schema as tables
from surehand.store import tasks as task_rows
from surehand.testing import embedded
from tests.chaos_agents import EFFECT_SECONDS_ENV, SLEEP_ENV, plan_body, read_effects
from tests.procs import Proc, spawn, terminate_backends
from tests.shared.chaos import INTERVAL, Chaos, open_chaos, postgres_only

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SEED = 10
DEV_WORKERS = 3
ROUNDS = 4
TASKS_PER_ROUND = 12  # 48 TASKs
PLANS = (
    ["rest", "unkeyed", "keyed"],
    ["keyed", "rest", "unkeyed"],
    ["unkeyed", "rest"],
    ["keyed", "keyed"],
    ["rest", "rest"],
    ["flaky", "unkeyed"],  # fails before any effect: nothing open
    ["unkeyed", "keyed", "flaky"],  # fails after settled effects: a retry replays them
)
AGENT = "tests.chaos_agents:mixed_effects"
REPUBLISH_AFTER = 2.0
SETTLE_TIMEOUT = 45.0
T = TypeVar("T")
OPEN_INTENTS = (  # of attempts still running: a session in the middle of an operation
    select(tables.operations.c.task_id, tables.operations.c.name)
    .join(tables.attempts, tables.attempts.c.attempt_id == tables.operations.c.attempt_id)
    .where(
        tables.operations.c.state == OperationState.INTENT.value,
        tables.attempts.c.state == AttemptState.RUNNING.value,
    )
)


# -- the deployment ---------------------------------------------------------------------------


@dataclass
class Faults:
    """What the chaos rounds did, counted where it happened (not what they meant to do)."""

    kills_inside_an_effect: int = 0
    random_kills: int = 0
    redis_restarts: int = 0
    backends_terminated: int = 0
    log: list[str] = field(default_factory=list)


@dataclass
class Deployment:
    """Workers, beat and the chaos rounds, on top of ``test_chaos.Chaos`` (Redis, store, waits)."""

    chaos: Chaos
    rng: random.Random
    dev: list[Proc] = field(default_factory=list)
    submissions: dict[str, str] = field(default_factory=dict)  # client_submission_id -> TASK
    faults: Faults = field(default_factory=Faults)

    def env(self) -> dict[str, str]:
        return self.chaos.env(
            "mixed_effects",
            None,
            {
                "SUREHAND_AGENTS": f"DEV={AGENT},OPS={AGENT}",
                "SUREHAND_RECONCILE_INTERVAL_SECONDS": str(INTERVAL),
                "SUREHAND_REPUBLISH_AFTER_SECONDS": str(REPUBLISH_AFTER),
                "SUREHAND_HOME": str(self.chaos.tmp / "home"),
                SLEEP_ENV: "0.15",
                EFFECT_SECONDS_ENV: "0.25",
                # Transient failures are retried on the evidence, quickly; kills in between
                # count in the same streak, so a few more attempts than the default.
                "SUREHAND_RETRY_BACKOFF_SECONDS": "0.2",
                "SUREHAND_RETRY_OVERLOAD_BACKOFF_SECONDS": "0.3",
                "SUREHAND_RETRY_MAX_ATTEMPTS": "5",
            },
        )

    def spawn(self, *args: str) -> Proc:
        name = f"{args[0]}{len(self.chaos.procs) + 1}"
        proc = spawn(list(args), self.env(), self.chaos.tmp / f"{name}.log")
        self.chaos.procs.append(proc)
        return proc

    def worker(self, role: str) -> Proc:
        """Start ``surehand worker --roles ROLE`` (one session at a time); does not wait."""
        name = f"w{len(self.chaos.procs) + 1}@deploy"
        proc = self.spawn("worker", "--roles", role, "--concurrency", "1", "--hostname", name)
        if role == "DEV":
            self.dev.append(proc)
        return proc

    def start(self) -> None:
        started = [self.worker("DEV") for _ in range(DEV_WORKERS)]
        started.append(self.worker("OPS"))
        beat = self.spawn("beat")
        for proc in started:
            self.wait_ready(proc, "ready.")
        self.wait_ready(beat, "beat: Starting")

    def wait_ready(self, proc: Proc, banner: str) -> None:
        self.chaos.wait(
            lambda: banner in proc.output() or proc.returncode is not None,
            f"{proc.log.name} to start",
            timeout=60,
        )
        assert proc.returncode is None, proc.output()[-3000:]

    # -- faults -------------------------------------------------------------------------------

    def kill_a_worker(self, *, inside_an_effect: bool) -> None:
        """SIGKILL a DEV worker (its whole process group) and start another: a random one, or
        one caught between its effect and the effect's outcome (when found within 3 s)."""
        live = [p for p in self.dev if p.returncode is None]
        caught = self.worker_inside_an_effect(live) if inside_an_effect else None
        victim = caught or self.rng.choice(live)
        victim.kill(signal.SIGKILL)
        assert victim.returncode == -signal.SIGKILL, victim.output()[-2000:]
        self.dev.remove(victim)
        self.worker("DEV")
        if caught:
            self.faults.kills_inside_an_effect += 1
        else:
            self.faults.random_kills += 1
        self.faults.log.append(f"SIGKILL {victim.log.name}{' inside an effect' if caught else ''}")

    def worker_inside_an_effect(self, live: list[Proc], timeout: float = 3.0) -> Proc | None:
        """The worker of the latest effect whose outcome is not recorded yet, if any: one in an
        unkeyed effect if one shows up in time (only its kill leaves an intent that admission
        must hold), else one in a keyed effect (its successor repeats it with its key)."""
        by_pid = {p.process.pid: p for p in live}
        deadline = time.monotonic() + timeout
        keyed: Proc | None = None
        while time.monotonic() < deadline:
            inside = [e for e in self.effects_without_outcome() if e["pid"] in by_pid]
            unkeyed = [e for e in inside if str(e["name"]).startswith("unkeyed")]
            if unkeyed:
                return by_pid[unkeyed[-1]["pid"]]
            keyed = by_pid[inside[-1]["pid"]] if inside else None  # as of this look
            time.sleep(0.02)
        return keyed

    def effects_without_outcome(self) -> list[dict[str, Any]]:
        """Ledger lines whose operation's intent is still open in a running attempt."""
        try:
            with self.chaos.store.snapshot() as connection:
                open_intents = {(row.task_id, row.name) for row in connection.execute(OPEN_INTENTS)}
        except StoreUnavailable:
            return []
        effects = read_effects(self.chaos.effects_path)
        return [e for e in effects if (e["task_id"], e["name"]) in open_intents]

    def restart_redis(self) -> None:
        self.chaos.broker.restart()
        self.faults.redis_restarts += 1
        self.faults.log.append("redis restarted")

    def drop_connections(self) -> None:
        killed = terminate_backends(self.chaos.store.url)
        self.faults.backends_terminated += killed
        self.faults.log.append(f"pg_terminate_backend x{killed}")

    def pause(self, low: float, high: float) -> None:
        time.sleep(self.rng.uniform(low, high))

    def run_round(self, number: int) -> None:
        self.submit(TASKS_PER_ROUND)
        self.pause(0.8, 1.6)
        self.kill_a_worker(inside_an_effect=number % 2 == 1)
        self.pause(0.3, 0.8)
        self.restart_redis()
        self.pause(0.5, 1.2)
        self.drop_connections()
        self.pause(0.3, 0.8)

    # -- submissions --------------------------------------------------------------------------

    def submit(self, count: int) -> None:
        for _ in range(count):
            n = len(self.submissions) + 1
            submission_id = f"deploy-{n}"
            self.submissions[submission_id] = self.write_task(submission_id, PLANS[n % len(PLANS)])

    def write_task(self, submission_id: str, plan: list[str]) -> str:
        """Create the TASK, retrying the same submission while the store is unavailable."""

        def create() -> str:
            result = self.chaos.sh.write_task(
                sender="PM",
                recipient="DEV",
                subject=f"Chaos {submission_id}",
                body=plan_body(plan),
                client_submission_id=submission_id,
            )
            assert result.task_id is not None, result
            return result.task_id

        return retrying(create)

    # -- the end --------------------------------------------------------------------------------

    def settle(self) -> list[TaskRecord]:
        """Wait (bounded) until no TASK is in motion; the records as they are then."""
        for proc in self.dev:
            self.wait_ready(proc, "ready.")
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            records = self.records()
            if not [r for r in records if r.in_motion] or time.monotonic() > deadline:
                return records
            time.sleep(0.25)

    def records(self) -> list[TaskRecord]:
        effects = defaultdict(list)
        for effect in read_effects(self.chaos.effects_path):
            effects[effect["task_id"]].append(effect)
        return retrying(lambda: read_records(self.chaos.store.url, effects))

    def release_a_hold(self, verdict: Verdict) -> Task | None:
        """Review one TASK held on an open intent whose effect ran (``present``: the ledger
        shows it): the TASK as it is after the review, or None when no such hold exists."""
        held = verdict.by(lambda r: r.open_intents_that_ran() and r.task.hold is not None)
        if not held:
            return None
        record = next(r for r in verdict.records if r.task_id == held[0])
        assert record.task.hold is not None
        case_id = record.task.hold.case_id
        sh = self.chaos.sh
        retrying(lambda: sh.review(case_id, effect="present", note="in the ledger", actor="PM"))
        return retrying(lambda: sh.get_task(record.task_id))


def retrying(call: Callable[[], T], tries: int = 10) -> T:
    """``call()``, again after a short pause while a terminated connection makes it fail."""
    for _ in range(tries - 1):
        try:
            return call()
        except (StoreUnavailable, DBAPIError):
            time.sleep(0.2)
    return call()


# -- what the store and the ledger say ----------------------------------------------------------


@dataclass(frozen=True)
class TaskRecord:
    """One TASK as the store records it, with its effects as the ledger records them."""

    task: Task
    attempts: list[Attempt]
    operations: list[Operation]
    cases: list[InterruptionCase]
    effects: list[dict[str, Any]]
    history: list[TaskEvent]

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def running(self) -> bool:
        return any(a.state is AttemptState.RUNNING for a in self.attempts)

    @property
    def open_cases(self) -> list[InterruptionCase]:
        return [c for c in self.cases if c.state is CaseState.OPEN]

    @property
    def held(self) -> bool:
        return self.task.hold is not None or any(
            c.admission is Admission.HOLD_FOR_REVIEW for c in self.open_cases
        )

    @property
    def stranded(self) -> bool:
        """In ``active`` with no running attempt, no open case and no hold: nobody will move
        it, and nobody was asked to."""
        return (
            self.task.bucket is Bucket.ACTIVE
            and not self.running
            and not self.open_cases
            and not self.held
        )

    @property
    def in_motion(self) -> bool:
        """Something will still happen to it without anyone's review."""
        return (
            self.task.bucket is Bucket.INBOX
            or self.running
            or (bool(self.open_cases) and not self.held)
        )

    def unkeyed_repeats(self) -> list[str]:
        """Unkeyed effects the ledger saw more than once."""
        counts = Counter(e["name"] for e in self.effects if e["key"] is None)
        return sorted(name for name, seen in counts.items() if seen > 1)

    def keyed_with_two_keys(self) -> list[str]:
        """Keyed effects repeated with a key other than their first."""
        keys: dict[str, set[str]] = defaultdict(set)
        for effect in self.effects:
            if effect["key"] is not None:
                keys[effect["name"]].add(effect["key"])
        return sorted(name for name, seen in keys.items() if len(seen) > 1)

    def open_intents_that_ran(self) -> list[Operation]:
        ran = {e["name"] for e in self.effects}
        return [
            op for op in self.operations if op.state is OperationState.INTENT and op.name in ran
        ]

    def describe(self) -> str:
        hold = f" held ({self.task.hold.case_id})" if self.task.hold else ""
        tries = ", ".join(
            f"#{a.number} {a.state.value}" + (f" ({a.error[:120]})" if a.error else "")
            for a in self.attempts
        )
        found = ", ".join(
            f"{c.case_id} {c.state.value} {c.effect_fact and c.effect_fact.value}"
            f"->{c.admission and c.admission.value}"
            for c in self.cases
        )
        ops = ", ".join(f"{op.name}@{op.epoch} {op.state.value}" for op in self.operations)
        ledger = ", ".join(f"{e['name']}@{e['attempt']}" for e in self.effects)
        return (
            f"{self.task_id} {self.task.bucket.value}{hold}; attempts: {tries or '-'}; "
            f"cases: {found or '-'}; operations: {ops or '-'}; ledger: {ledger or '-'}\n"
            f"      history: {' '.join(_event(e) for e in self.history)}"
        )


def _event(event: TaskEvent) -> str:
    move = f" {event.from_bucket or '-'}->{event.to_bucket}" if event.to_bucket else ""
    return f"{event.kind.value}({event.action or ''}{move} #{event.epoch or '-'})"


def read_records(url: str, effects: dict[str, list[dict[str, Any]]]) -> list[TaskRecord]:
    """Every TASK's records as of one moment: a REPEATABLE READ transaction, on a connection of
    its own. (Under READ COMMITTED each statement sees a newer moment: a TASK listed in
    ``active`` whose settle commits before its attempts are read would look stranded.)"""
    engine = create_engine(url, poolclass=NullPool, isolation_level="REPEATABLE READ")
    try:
        with engine.connect() as connection, connection.begin():
            listed = task_rows.list_tasks(connection, tenant=None, limit=100_000)
            return [record_of(connection, task, effects.get(task.task_id, [])) for task in listed]
    finally:
        engine.dispose()


def record_of(connection: Connection, task: Task, effects: list[dict[str, Any]]) -> TaskRecord:
    return TaskRecord(
        task=task,
        attempts=attempt_rows.for_task(connection, task.task_id),
        operations=operation_rows.for_task(connection, task.task_id),
        cases=case_rows.for_task(connection, task.task_id),
        effects=effects,
        history=event_rows.history(connection, task.task_id),
    )


@dataclass(frozen=True)
class Verdict:
    """The end state of a run, and everything a failure message needs to explain it."""

    records: list[TaskRecord]
    submissions: dict[str, str]
    faults: Faults

    def by(self, predicate: Callable[[TaskRecord], object]) -> list[str]:
        return [r.task_id for r in self.records if predicate(r)]

    @property
    def duplicate_tasks(self) -> list[str]:
        """TASKs beyond the first for one submission id, or named by no submission."""
        per_submission = Counter(r.task.client_submission_id for r in self.records)
        answered = set(self.submissions.values())
        return self.by(
            lambda r: per_submission[r.task.client_submission_id] > 1 or r.task_id not in answered
        )

    @property
    def lost_submissions(self) -> list[str]:
        stored = {r.task_id for r in self.records}
        return sorted(s for s, task_id in self.submissions.items() if task_id not in stored)

    @property
    def stranded(self) -> list[str]:
        return self.by(lambda r: r.stranded)

    @property
    def unkeyed_effects_run_twice(self) -> list[str]:
        return self.by(lambda r: r.unkeyed_repeats())

    @property
    def keyed_effects_with_a_new_key(self) -> list[str]:
        return self.by(lambda r: r.keyed_with_two_keys())

    @property
    def ran_but_not_held(self) -> list[str]:
        return self.by(lambda r: r.open_intents_that_ran() and not r.held)

    @property
    def in_motion(self) -> list[str]:
        return self.by(lambda r: r.in_motion)

    @property
    def agent_failed(self) -> list[str]:
        return self.by(lambda r: any(a.cause is AttemptCause.AGENT_FAILED for a in r.attempts))

    @property
    def retried_to_review(self) -> list[str]:
        """TASKs whose agent failed transiently and that reached review without a person."""
        return self.by(
            lambda r: (
                r.task.bucket is Bucket.REVIEW
                and any(a.cause is AttemptCause.AGENT_FAILED for a in r.attempts)
            )
        )

    @property
    def held_without_open_intent(self) -> list[str]:
        """Held, though no effect was left open: holds are only for open intents."""
        return self.by(
            lambda r: r.held and not any(op.state is OperationState.INTENT for op in r.operations)
        )

    @property
    def open_intent_holds(self) -> list[str]:
        """TASKs held on an open intent whose effect ran: the hold path was taken."""
        return self.by(lambda r: r.open_intents_that_ran() and r.held)

    def shortfalls(self) -> list[str]:
        """The faults that did not take effect and the work that did not get done."""
        faults = self.faults
        effects = sum(len(r.effects) for r in self.records)
        checks = {
            "no kill landed inside an effect": faults.kills_inside_an_effect < 1,
            "pg_terminate_backend terminated no backend": faults.backends_terminated < 1,
            "no TASK reached review": not self.by(lambda r: r.task.bucket is Bucket.REVIEW),
            "no effect ran": effects < 1,
            "no transient failure was retried to review": not self.retried_to_review,
            "no open intent whose effect ran was held": not self.open_intent_holds,
        }
        return [title for title, failed in checks.items() if failed]

    def summary(self) -> str:
        buckets = Counter(r.task.bucket.value for r in self.records)
        states = Counter(a.state.value for r in self.records for a in r.attempts)
        admissions = Counter(
            c.admission.value if c.admission else "undecided" for r in self.records for c in r.cases
        )
        effects = sum(len(r.effects) for r in self.records)
        return (
            f"{len(self.records)} TASKs for {len(self.submissions)} submissions; "
            f"buckets {dict(buckets)}; attempts {dict(states)}; cases {dict(admissions)}; "
            f"held {len(self.by(lambda r: r.held))}; {effects} effects in the ledger\n"
            f"faults: {'; '.join(self.faults.log)}"
        )

    def explain(self) -> str:
        problems = {
            "duplicate TASKs": self.duplicate_tasks,
            "stranded in active (no running attempt, no open case, no hold)": self.stranded,
            "unkeyed effects run twice": self.unkeyed_effects_run_twice,
            "keyed effects repeated with another key": self.keyed_effects_with_a_new_key,
            "open intents whose effect ran, not held": self.ran_but_not_held,
            f"still in motion after {SETTLE_TIMEOUT:.0f}s": self.in_motion,
            "held without an open intent": self.held_without_open_intent,
        }
        named = {r.task_id: r for r in self.records}
        lines = [self.summary(), *(f"shortfall: {s}" for s in self.shortfalls())]
        for title, task_ids in problems.items():
            if task_ids:
                lines.append(f"{title}: {len(task_ids)}")
                lines.extend(f"  {named[task_id].describe()}" for task_id in task_ids)
        return "\n".join(lines)


# -- the test -------------------------------------------------------------------------------------


@postgres_only
def test_a_deployment_under_kills_redis_restarts_and_dropped_connections_strands_nothing(
    store: Store, tmp_path: Path
) -> None:
    """Workers SIGKILLed mid-session, Redis restarted, every database connection terminated,
    four rounds over 48 TASKs: no TASK is duplicated or stranded, no unkeyed effect runs twice,
    and every effect that ran without a recorded outcome is held for review."""
    try:
        with open_chaos(store, tmp_path, separate_lease_redis=False) as chaos:
            deployment = Deployment(chaos, random.Random(SEED))
            deployment.start()
            for number in range(ROUNDS):
                deployment.run_round(number)
            verdict = Verdict(deployment.settle(), deployment.submissions, deployment.faults)
            released = deployment.release_a_hold(verdict)
    finally:
        store.dispose()  # its pooled connections were terminated too
    print(verdict.summary())  # shown with -rP: what the faults did

    assert verdict.lost_submissions == [], verdict.explain()
    assert verdict.duplicate_tasks == [], verdict.explain()
    assert verdict.stranded == [], verdict.explain()
    assert verdict.unkeyed_effects_run_twice == [], verdict.explain()
    assert verdict.keyed_effects_with_a_new_key == [], verdict.explain()
    assert verdict.ran_but_not_held == [], verdict.explain()
    assert verdict.held_without_open_intent == [], verdict.explain()
    assert verdict.in_motion == [], verdict.explain()
    assert verdict.shortfalls() == [], verdict.explain()
    assert released is not None, verdict.explain()
    assert released.hold is None, f"{released.task_id} still held after the review"


def test_a_run_where_every_session_failed_passes_the_safety_checks_but_falls_short(
    tmp_path: Path,
) -> None:
    """Every agent raised, no kill landed inside an effect, no backend was terminated: nothing
    is duplicated, stranded or moving (a failed agent's TASK is held), so only the shortfalls
    tell this run from a good one."""

    def always_raises(ctx: SessionContext) -> str:
        raise RuntimeError(f"the agent of {ctx.task.task_id} always raises")

    # Its effects unobserved: its role makes one attempt, so each failure is held at once.
    always_raises.effects_observed = None  # type: ignore[attr-defined]

    submissions: dict[str, str] = {}
    with embedded(tmp_path) as sh:
        sh.agent("DEV")(always_raises)
        for n in range(1, 4):
            written = sh.write_task(
                sender="PM", recipient="DEV", subject="Chaos", client_submission_id=f"deploy-{n}"
            )
            assert written.task_id is not None
            submissions[f"deploy-{n}"] = written.task_id
            sh.run_session(written.task_id)
        sh.reconcile()  # admission decides the failed sessions' cases, as the reconciler would
        with sh.store.snapshot() as connection:
            listed = task_rows.list_tasks(connection, tenant=None)
            records = [record_of(connection, task, []) for task in listed]
    verdict = Verdict(records, submissions, Faults(random_kills=ROUNDS, redis_restarts=ROUNDS))

    assert (verdict.duplicate_tasks, verdict.stranded, verdict.in_motion) == ([], [], []), (
        verdict.explain()
    )
    assert verdict.shortfalls() == [
        "no kill landed inside an effect",
        "pg_terminate_backend terminated no backend",
        "no TASK reached review",
        "no effect ran",
        "no transient failure was retried to review",
        "no open intent whose effect ran was held",
    ]
    # Its holds are no open intent's: the full run's safety check tells them too.
    assert len(verdict.held_without_open_intent) == 3
