"""The session protocol explored by a machine: leases, heartbeats, fencing, the reconciler,
admission, reviews and recover requests, against the real store and the real lease scripts.

:class:`ProtocolMachine` is a hypothesis ``RuleBasedStateMachine``. Its rules are what the
world and the protocol's actors may do, in any order: submit a TASK, claim it (a worker,
maybe for a successor, maybe a duplicate message), take the lease, tick a heartbeat, declare
and run an effect (keyed or not, failing or not, killed at any crash point of an operation),
return and settle (killed after the return is recorded, or not), fail, end after a lost
lease, be killed, or simply not be scheduled (a paused owner: every write it makes later is a
late write). The world moves the injected clock past TTLs and grace windows, takes Redis away
(from the next call or in the middle of a pass), brings it back, restarts it without its
data, and runs reconciler passes (two reconcilers). Approvers and others review held cases,
saying the effect was present or absent, and ask for recovery.

After every step :meth:`ProtocolMachine.protocol_holds` checks the invariants (see
``docs/exploration.md``); the fence and the heartbeat are also checked in the step itself,
where the machine knows who wrote and what Redis had said.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from surehand.agents.context import SessionContext
from surehand.config import Settings
from surehand.crashpoints import CrashPoint
from surehand.dispatcher import reviews
from surehand.dispatcher.admission import Admitter
from surehand.dispatcher.agent_port import AgentPort
from surehand.dispatcher.claims import claim
from surehand.dispatcher.context import Services
from surehand.dispatcher.effects import unsettled
from surehand.dispatcher.lifecycle import approvers
from surehand.dispatcher.reconciler import Reconciler
from surehand.dispatcher.recovery import Recovery
from surehand.dispatcher.sessions import Session
from surehand.dispatcher.submissions import write_task
from surehand.errors import (
    EffectLeftOpen,
    LeaseLost,
    LeaseUnavailable,
    NotAuthorized,
    OperationFailed,
    SessionInterrupted,
    StaleOwner,
)
from surehand.model import (
    Admission,
    AttemptCause,
    AttemptState,
    Bucket,
    CaseState,
    EventKind,
    ReportStatus,
    RetryPolicy,
)
from surehand.store import Store, attempts, cases, events, operations, reports, tasks
from surehand.testing import DEFAULT_START, ManualClock
from tests.explore_world import (
    UNREACHABLE,
    Beat,
    Crashes,
    Killed,
    ModelLeases,
    WorkerLeases,
    empty_store,
    fresh_namespace,
)

TTL = 30.0
HEARTBEAT = 10.0
GRACE = 15.0
TENANT = "default"
MAX_TASKS = 2
MAX_ACTORS = 6
APPROVERS, OTHERS = ("PM", "ADMIN"), ("DEV", "QA")  # of PM->DEV TASKs
ROLES = APPROVERS + OTHERS
JUMPS = (1.0, 5.0, 10.0, 16.0, 30.0, 31.0, 61.0)
OPERATION_KILLS = (
    None,
    CrashPoint.OPERATION_AFTER_INTENT,
    CrashPoint.OPERATION_AFTER_EFFECT,
    CrashPoint.OPERATION_AFTER_OUTCOME,
)
# After the effect and before its outcome is the kill that leaves an effect in doubt: twice as
# likely as the others.
MID_OPERATION_KILLS = (*OPERATION_KILLS[1:], CrashPoint.OPERATION_AFTER_EFFECT)
EFFECTS = ("charge", "email")  # charge: keyed, retry policy keyed; email: no key
OUTAGES = (None, "holder", "holders")  # admission's liveness question, a pass's scan
# What happens to one owner while the reconciler watches: it lives, or it stops renewing.
OWNERS = ("beats", "paused", "killed", "cut off")
# Stories of the hazards the protocol's promises are about: every example begins with one
# (its_first_worker_starts) and may meet more (a_hazard_strikes), so that even the default
# budget meets each of them often.
HAZARDS = (
    "a long outage",
    "a freeze across a restart",
    "an owner dies, Redis fails admission",
    "an owner dies, a successor starts",
    "an owner dies in its effect, a successor redoes it",
    "a frozen owner reports late",
    "a frozen owner's effect outlives its successor's start",
    "an owner is cut off from Redis",
    "the agent raises and is held",
)
# The session writes an old owner makes late ("outcome": of an effect it was frozen in).
LATE_WRITES = ("report", "operation", "settle", "fail", "heartbeat", "outcome")


def explore_settings(store: Store) -> Settings:
    return Settings.model_validate(
        {
            "database_url": store.url,
            "redis_url": "",
            "lease_ttl_seconds": TTL,
            "heartbeat_seconds": HEARTBEAT,
            "lost_grace_seconds": GRACE,
            "submission_wait_seconds": 0.0,
        }
    )


@dataclass
class World:
    """What outlives one example: the store, the Redis client, the crash points."""

    store: Store
    redis: Any
    crashes: Crashes


@dataclass(frozen=True)
class Run:
    """One performed effect, as the far side saw it."""

    task_id: str
    name: str
    attempt: int
    key: str | None
    licensed: bool


@dataclass
class Actor:
    """One session's process: claimed, maybe leased, alive until killed or ended."""

    number: int
    session: Session
    leases: WorkerLeases  # its own view of Redis, which a partition cuts
    beat: Beat | None = None  # its heartbeat, once it holds the lease
    alive: bool = True
    ended: bool = False
    paused: bool = False  # not scheduled: neither its heartbeat nor its agent runs
    cut_off: bool = False  # partitioned from Redis (not from the store)

    @property
    def context(self) -> SessionContext:
        """What its agent holds: the context the runner builds (``ctx.operation`` ...)."""
        session = self.session
        return SessionContext(
            task=session.task,
            attempt=session.attempt,
            port=AgentPort(session),
            cancelled=session.cancelled,
        )

    def gone(self, *, killed: bool) -> None:
        """The process ended its session (``killed``: was killed); its heartbeat stops."""
        if killed:
            self.alive = False
        else:
            self.ended = True
        if self.beat is not None:
            self.beat.stop()

    @property
    def task_id(self) -> str:
        return self.session.task_id

    @property
    def attempt_id(self) -> str:
        return self.session.attempt.attempt_id

    @property
    def running(self) -> bool:
        return self.alive and not self.ended


@dataclass
class Checkpoint:
    """Whether an actor's attempt owned its TASK, and what a write could change, before it."""

    owned: bool
    before: tuple[object, ...]


@dataclass
class Model:
    """What the machine knows that the store must agree with."""

    tasks: list[str] = field(default_factory=list)
    actors: list[Actor] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    licences: Counter[tuple[str, str]] = field(default_factory=Counter)
    approved_reviews: set[str] = field(default_factory=set)  # case ids an approver reviewed
    holds: dict[str, str | None] = field(default_factory=dict)  # task -> holding case
    decisions: dict[str, tuple[Admission | None, datetime | None]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    stale: set[int] = field(default_factory=set)  # live actors whose attempt lost its TASK


class ProtocolMachine(RuleBasedStateMachine):
    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world
        store = world.store
        empty_store(store)
        self.clock = ManualClock(DEFAULT_START)
        settings = explore_settings(store)
        self.services = Services(store=store, settings=settings, clock=self.clock)
        self.leases = ModelLeases(self.world.redis, fresh_namespace(), self.clock, TTL)
        self.recovery = Recovery(Admitter(self.services, self.leases, lambda _name: None))
        self.reconcilers = (Reconciler(self.recovery), Reconciler(self.recovery))
        self.model = Model()
        self.world.crashes.armed = None
        self.steps = 0  # invariant checks: one before the first step, then one per step

    def teardown(self) -> None:
        if os.environ.get("SUREHAND_TEST_EXPLORE_DEBUG"):
            print(_debug_summary(self))  # asked for: what the example reached
        self.world.crashes.armed = None
        for actor in self.model.actors:
            if actor.beat is not None:
                actor.beat.stop()
        self.leases.wipe()

    # -- choosing -----------------------------------------------------------------------------

    def _actors(
        self, leased: bool | None = None, lost: bool = False, stale: bool = False
    ) -> list[Actor]:
        return [
            a
            for a in self.model.actors
            if a.running
            and (leased is None or (a.beat is not None) == leased)
            and (not lost or (a.beat is not None and a.beat.lost))
            and (not stale or a.number in self.model.stale)
        ]

    def _actor(
        self, index: int, leased: bool | None = True, lost: bool = False, stale: bool = False
    ) -> Actor:
        found = self._actors(leased, lost, stale)
        return found[index % len(found)]

    def _task(self, index: int) -> str | None:
        return self.model.tasks[index % len(self.model.tasks)] if self.model.tasks else None

    # -- TASKs and claims ----------------------------------------------------------------------

    @initialize()
    def first_task(self) -> None:
        if not self.model.tasks:  # (the initialize rules run in either order)
            self.submit()

    @initialize(index=st.integers(0, 7), hazard=st.sampled_from(HAZARDS))
    def its_first_worker_starts(self, index: int, hazard: str | None = None) -> None:
        """Every example begins with a live session (unclaimed TASKs come from ``submit``),
        and one of the protocol's hazards hitting it at once (:data:`HAZARDS`): the budget is
        spent on what happens to sessions, not on reaching one."""
        self.first_task()
        self.worker_starts(index)
        if hazard is not None:
            self.hazard(hazard)

    @precondition(lambda self: self._actors(leased=True))
    @rule(hazard=st.sampled_from(HAZARDS))
    def a_hazard_strikes(self, hazard: str) -> None:
        """One of :data:`HAZARDS` hits the first live session."""
        self.hazard(hazard)

    def hazard(self, name: str) -> None:
        """One of the situations DESIGN.md's promises are about, as the machine's steps."""
        while_ = self.a_while_passes_under_the_reconciler
        stories: dict[str, Callable[[], object]] = {
            "a long outage": lambda: self.an_outage_lasts(after=0, rounds=4, passes=True),
            "a freeze across a restart": lambda: self.a_pause_across_a_restart(TTL),
            "an owner dies, Redis fails admission": lambda: while_(TTL + GRACE, "holder", "killed"),
            "an owner dies, a successor starts": lambda: (
                while_(TTL + GRACE, None, "killed"),
                self.worker_starts(0),
            ),
            "an owner dies in its effect, a successor redoes it": lambda: (
                self.killed_in_an_operation(0, "email", CrashPoint.OPERATION_AFTER_EFFECT, True)
            ),
            "a frozen owner reports late": lambda: self.an_old_owner_writes_late(
                0, "report", successor=False
            ),
            "a frozen owner's effect outlives its successor's start": lambda: (
                self.an_old_owner_writes_late(0, "outcome", successor=True)
            ),
            "an owner is cut off from Redis": lambda: while_(TTL + GRACE, None, "cut off"),
            "the agent raises and is held": lambda: (self.agent_raises(0), self.reconcile(0)),
        }
        stories[name]()

    @precondition(lambda self: len(self.model.tasks) < MAX_TASKS)
    @rule()
    def submit(self) -> None:
        number = len(self.model.tasks) + 1
        result = write_task(
            self.services,
            {
                "sender": "PM",
                "recipient": "DEV",
                "subject": f"Charge customer {number}",
                "body": "Charge acme 5 EUR, mail the receipt, and report.",
                "client_submission_id": f"explore-{number}",
            },
            tenant=TENANT,
        )
        assert result.task_id is not None
        self.model.tasks.append(result.task_id)

    @precondition(lambda self: len(self.model.actors) < MAX_ACTORS)
    @rule(index=st.integers(0, 7))
    def claim(self, index: int) -> None:
        """A worker claims the TASK: a first claim, a successor's, or a duplicate message."""
        task_id = self._task(index)
        assert task_id is not None
        session = claim(self.services, task_id, worker=f"worker-{index}", message_id=None)
        if session is not None:
            number = len(self.model.actors) + 1
            actor = Actor(number, session, WorkerLeases(self.leases, lambda: actor.cut_off))
            self.model.actors.append(actor)

    @precondition(lambda self: len(self.model.actors) < MAX_ACTORS)
    @rule(index=st.integers(0, 7))
    def worker_starts(self, index: int) -> None:
        """The common path in one step: claim, then take the lease."""
        before = len(self.model.actors)
        self.claim(index)
        if len(self.model.actors) > before:
            self.take_lease(len(self._actors(leased=False)) - 1)

    @precondition(lambda self: self._actors(leased=False))
    @rule(index=st.integers(0, 7))
    def take_lease(self, index: int) -> None:
        """``SET NX PX`` the lease and start the heartbeat; a lease another attempt holds
        rolls the claim back."""
        actor = self._actor(index, leased=False)
        try:
            taken, generation = actor.leases.acquire_with_generation(
                actor.task_id, actor.attempt_id, int(TTL * 1000)
            )
        except LeaseUnavailable:
            return  # the runner tries again (and rolls back after a TTL)
        if not taken:
            self._write(actor, "rollback", lambda: actor.session.rollback("lease held"))
            actor.gone(killed=False)
            return
        session = actor.session
        actor.beat = Beat(
            actor.leases,
            self.leases.now,
            (actor.task_id, actor.attempt_id, generation),
            TTL,
            HEARTBEAT,
            on_lost=lambda _lost: session.cancelled.set(),
        )
        actor.beat.start()

    # -- heartbeats: they run as the clock moves -----------------------------------------------

    def _advance(self, seconds: float, *, beating: bool = True) -> None:
        """Move the injected clock ``seconds`` on. Leases whose TTL ran out by it are gone
        from Redis, and (unless every process is frozen: ``beating`` False) each heartbeat
        of a live, scheduled session runs at the moments it asked to, in order of time."""
        target = self.leases.now() + seconds
        ran: set[int] = set()  # at this instant (a heartbeat runs once per instant)
        while beating and (due := self._next_beat(target, ran)) is not None:
            when, actor = due
            if when > self.leases.now():
                self.clock.advance(when - self.leases.now())
                self.leases.expire()
                ran.clear()
            ran.add(actor.number)
            self._beat(actor)
        self.clock.advance(max(0.0, target - self.leases.now()))
        self.leases.expire()

    def _next_beat(self, until: float, ran: set[int]) -> tuple[float, Actor] | None:
        now = self.leases.now()
        due = [
            (actor.beat.due, actor.number, actor)
            for actor in self._actors(leased=True)
            if actor.beat is not None
            and actor.beat.due is not None
            and actor.beat.due <= until
            and not actor.paused
            and not (actor.beat.due <= now and actor.number in ran)
        ]
        return min(due)[::2] if due else None

    def _beat(self, actor: Actor) -> None:
        """One run of the actor's heartbeat: a renewal and its loss decision. A lease may be
        kept only while it was never unrenewed for a full TTL (by the injected clock): after
        that a successor may hold the TASK, so a heartbeat that keeps or retakes it is a
        second live owner."""
        assert actor.beat is not None
        since = self.leases.now() - self.leases.renewed.get(actor.attempt_id, float("-inf"))
        actor.beat.run()
        if not actor.beat.lost and since >= TTL:
            self.model.violations.append(
                f"heartbeat of attempt {actor.number} kept its lease {since:g}s after its last "
                f"renewal (TTL {TTL:g}s)"
            )

    @precondition(lambda self: self._actors())
    @rule(index=st.integers(0, 7))
    def pause_or_resume(self, index: int) -> None:
        """A process stops being scheduled (GC, a VM freeze, SIGSTOP), or runs again: then
        its heartbeat, overdue, runs at once."""
        actor = self._actor(index, leased=None)
        actor.paused = not actor.paused
        self._advance(0.0)

    @precondition(lambda self: self._actors(leased=True))
    @rule(index=st.integers(0, 7))
    def cut_off_or_reconnect(self, index: int) -> None:
        """A worker loses its network path to Redis (not to the store), or gets it back: its
        heartbeat keeps running and fails to renew, as on an outage of its own."""
        actor = self._actor(index)
        actor.cut_off = not actor.cut_off

    @precondition(lambda self: self._actors(leased=True, lost=True))
    @rule(index=st.integers(0, 7))
    def end_after_lost_lease(self, index: int) -> None:
        """The runner's answer to a lost lease: end the attempt interrupted (fenced)."""
        self._interrupt(self._actor(index, lost=True))

    def _interrupt(self, actor: Actor) -> None:
        lost = SessionInterrupted("lease lost", cause=AttemptCause.LEASE_LOST.value)
        self._write(actor, "interrupt", lambda: actor.session.interrupt(lost))
        actor.gone(killed=False)

    # -- the agent's work ----------------------------------------------------------------------

    @precondition(lambda self: self._actors(leased=True))
    @rule(index=st.integers(0, 7), name=st.sampled_from(EFFECTS), raises=st.booleans())
    def an_operation(self, index: int, name: str, raises: bool) -> None:
        self.operation(index, name, raises, kill=None)

    @precondition(lambda self: self._actors(leased=True))
    @rule(
        index=st.integers(0, 7),
        name=st.sampled_from(EFFECTS),
        kill=st.sampled_from(MID_OPERATION_KILLS),
        then_a_successor=st.booleans(),
    )
    def killed_in_an_operation(
        self, index: int, name: str, kill: CrashPoint, then_a_successor: bool = False
    ) -> None:
        """The process dies in an operation; maybe (``then_a_successor``) a while later a
        successor starts and its agent does the same work again."""
        if not self._actors(leased=True):
            return
        actor = self._actor(index)
        self._operate(actor, name, raises=False, kill=kill)
        if then_a_successor:
            self._redo(actor.task_id, after_a_while=True)

    def operation(self, index: int, name: str, raises: bool, kill: CrashPoint | None) -> None:
        """``ctx.operation`` (the agent's API, through the runner's port); the effect may raise
        after it took effect, and the process may be killed at any crash point of the
        operation (two rules, so that a kill mid-effect is as likely as a whole operation)."""
        if not self._actors(leased=True):
            # (a replayed step whose actor is gone: see
            # tests/chaos/test_explore_protocol.py)
            return
        self._operate(self._actor(index), name, raises, kill)

    def _operate(
        self,
        actor: Actor,
        name: str,
        raises: bool,
        kill: CrashPoint | None,
        *,
        meanwhile: Callable[[], None] | None = None,
        tries: int = 1,
    ) -> None:
        """One operation; ``meanwhile`` is what the world does while its effect runs (the
        operation's outcome is then written after it: maybe a late write)."""
        key = f"{actor.task_id}:{name}" if name == "charge" else None
        policy = RetryPolicy.KEYED if key else RetryPolicy.NONE
        checkpoint = self._checkpoint(actor)

        def effect() -> str:
            self._perform(actor, name, key)
            if meanwhile is not None:
                meanwhile()
                fresh = self._checkpoint(actor)  # the late write is what comes after this
                checkpoint.owned, checkpoint.before = fresh.owned, fresh.before
            if raises:
                raise RuntimeError("gateway timeout (the charge may have gone through)")
            return f"{name}-done"

        context = actor.context
        self.world.crashes.armed = kill
        try:
            self._write(
                actor,
                f"operation_intent:{name}",
                lambda: context.operation(
                    name,
                    {"account": "acme", "what": name},
                    effect,
                    idempotency_key=key,
                    retry_policy=policy,
                ),
                checkpoint=checkpoint,
                tries=tries,
            )
        finally:
            self.world.crashes.armed = None

    def _perform(self, actor: Actor, name: str, key: str | None) -> None:
        """The effect, as the far side sees it; a repeat must be licensed."""
        task_id = actor.task_id
        before = [run for run in self.model.runs if (run.task_id, run.name) == (task_id, name)]
        licensed = not before or (key is not None and all(run.key == key for run in before))
        if not licensed and self.model.licences[(task_id, name)] > 0:
            self.model.licences[(task_id, name)] -= 1
            licensed = True
        if not licensed:
            self.model.violations.append(
                f"effect {name} of {task_id} ran again in attempt {actor.session.attempt.number} "
                f"(key {key}) with no review saying it was absent"
            )
        self.model.runs.append(Run(task_id, name, actor.session.attempt.number, key, licensed))

    @precondition(lambda self: len(self.model.actors) < MAX_ACTORS and self.model.runs)
    @rule(index=st.integers(0, 7), after_a_while=st.booleans())
    def a_successor_redoes_the_work(self, index: int, after_a_while: bool) -> None:
        """A worker starts on a TASK whose earlier attempt performed effects (at once, or
        after a while under the reconciler), and its agent does the same work again: every
        effect the TASK saw, in order (an agent program is the same program the second time;
        only admission and the journal stand between it and a repeat)."""
        self._redo(self.model.runs[index % len(self.model.runs)].task_id, after_a_while)

    def _redo(self, task_id: str, after_a_while: bool) -> None:
        done = [run.name for run in self.model.runs if run.task_id == task_id]
        if after_a_while:
            self.a_while_passes_under_the_reconciler(TTL + GRACE)
        before = len(self.model.actors)
        self.claim(self.model.tasks.index(task_id))
        if len(self.model.actors) == before or len(self.model.actors) > MAX_ACTORS:
            return
        self.take_lease(len(self._actors(leased=False)) - 1)
        actor = self.model.actors[-1]
        for name in dict.fromkeys(done):
            if actor.running and actor.beat is not None:
                self._operate(actor, name, raises=False, kill=None)

    @precondition(lambda self: self._actors(leased=True))
    @rule(index=st.integers(0, 7), killed_after_return=st.booleans())
    def settle(self, index: int, killed_after_return: bool) -> None:
        """The agent returns: record the return, write the REPORT, submit; the runner fails an
        attempt that returned with an effect still open."""
        actor = self._actor(index)
        if killed_after_return:
            self.world.crashes.armed = CrashPoint.SESSION_AFTER_RETURN
        try:
            self._write(actor, "settle", lambda: self._settle(actor))
        finally:
            self.world.crashes.armed = None
        self._end(actor)

    @staticmethod
    def _settle(actor: Actor) -> None:
        """The runner's settle of a returned agent (an effect left open fails the attempt)."""
        try:
            actor.session.settle({"answer": "charged and mailed"}, to_review=True)
        except EffectLeftOpen as left_open:
            actor.session.fail(left_open)

    @precondition(lambda self: self._actors(leased=True))
    @rule(index=st.integers(0, 7))
    def agent_raises(self, index: int) -> None:
        actor = self._actor(index)
        self._write(actor, "fail", lambda: actor.session.fail(RuntimeError("agent crashed")))
        self._end(actor)

    @precondition(lambda self: self._actors())
    @rule(index=st.integers(0, 7))
    def kill(self, index: int) -> None:
        """SIGKILL: the process is gone (after its claim, or anywhere in its work); its lease
        stays until its TTL runs out."""
        self._actor(index, leased=None).gone(killed=True)

    def _end(self, actor: Actor) -> None:
        """The runner's ``finally``: stop the heartbeat; release the lease unless it was
        lost."""
        if not actor.alive:
            return
        actor.gone(killed=False)
        if not actor.session.cancelled.is_set():
            with contextlib.suppress(LeaseUnavailable):
                actor.leases.release(actor.task_id, actor.attempt_id)

    # -- late writes of old owners ---------------------------------------------------------------

    @precondition(lambda self: self._actors(leased=True))
    @rule(index=st.integers(0, 7), write=st.sampled_from(LATE_WRITES), successor=st.booleans())
    def an_old_owner_writes_late(self, index: int, write: str, successor: bool) -> None:
        """An owner stops being scheduled; meanwhile its lease runs out, the reconciler
        confirms the loss and (``successor``) a successor is admitted and starts. Then it runs
        again and, before its heartbeat notices, makes ``write`` -- twice, as an agent that
        retries would. For ``outcome`` it was frozen inside its effect: the late write is the
        operation's outcome."""
        actor = self._actor(index)
        if write == "outcome":
            meanwhile = functools.partial(self._lost_meanwhile, actor, successor)
            self._operate(actor, "email", False, None, meanwhile=meanwhile, tries=1)
            return
        self._lost_meanwhile(actor, successor)
        self._late(actor, write)

    @precondition(lambda self: self._actors(stale=True))
    @rule(index=st.integers(0, 7), write=st.sampled_from(LATE_WRITES[:-1]))
    def a_late_write(self, index: int, write: str) -> None:
        """A live process whose attempt no longer owns its TASK (the reconciler judged it
        lost, or a successor was admitted) makes a session write."""
        self._late(self._actor(index, leased=None, stale=True), write)

    def _lost_meanwhile(self, actor: Actor, successor: bool) -> None:
        actor.paused = True
        self.a_while_passes_under_the_reconciler(TTL + GRACE)
        if successor and len(self.model.actors) < MAX_ACTORS:
            self.worker_starts(self.model.tasks.index(actor.task_id))
        actor.paused = False  # it runs again: its agent first, its heartbeat when next due

    def _late(self, actor: Actor, write: str) -> None:
        """``write`` by ``actor``, twice: refused, fenced and recorded once, never applied."""
        if write == "operation":
            self._operate(actor, "charge", False, None, tries=2)
        elif write == "heartbeat":  # its heartbeat runs, finds the lease lost: the runner ends
            if actor.beat is not None and not actor.beat.lost:
                self._beat(actor)
            if actor.beat is None or actor.beat.lost:
                self._interrupt(actor)
        else:
            calls: dict[str, Callable[[], object]] = {
                "report": lambda: actor.context.report("done, late", ReportStatus.DONE),
                "settle": lambda: self._settle(actor),
                "fail": lambda: actor.session.fail(RuntimeError("agent crashed, late")),
            }
            self._write(actor, write, calls[write], tries=2)
            if actor.running:
                self._end(actor)

    # -- the fence, checked in the step --------------------------------------------------------

    def _checkpoint(self, actor: Actor) -> Checkpoint:
        return Checkpoint(self._owned(actor), (self._state(actor.task_id), len(self.model.runs)))

    def _write(
        self,
        actor: Actor,
        kind: str,
        call: Callable[[], object],
        *,
        checkpoint: Checkpoint | None = None,
        tries: int = 1,
    ) -> None:
        """Run a session write (``tries`` times, as an agent that retries would); if the
        attempt did not own the TASK at ``checkpoint`` (before it), the write must be refused
        -- by the fence (``StaleOwner``, recorded by exactly one ``stale_owner_fenced`` event
        per kind of write) or by the port of a session that knows its lease is lost (kept in
        ``refused_late``) -- and change nothing: no row, no effect."""
        checkpoint = checkpoint or self._checkpoint(actor)
        try:
            for _ in range(tries - 1):
                with contextlib.suppress(StaleOwner, LeaseLost, OperationFailed):
                    call()
            call()
        except Killed:
            actor.gone(killed=True)
        except StaleOwner:
            self._check_recorded(actor, kind)
            actor.gone(killed=False)
        except LeaseLost:
            if not actor.session.refused_late:
                self.model.violations.append(f"{kind} of attempt {actor.number} refused unkept")
        except (OperationFailed, SessionInterrupted):
            pass
        after = self._state(actor.task_id), len(self.model.runs)
        if not checkpoint.owned and after != checkpoint.before:
            self.model.violations.append(
                f"{kind} of attempt {actor.number}, which no longer owned {actor.task_id}, "
                "was applied"
            )

    def _check_recorded(self, actor: Actor, kind: str) -> None:
        reasons = Counter(self._fenced_reasons(actor))
        if not reasons or max(reasons.values()) > 1:
            self.model.violations.append(
                f"{kind} of attempt {actor.number} was fenced, recorded as {dict(reasons)} "
                "(each kind of refused write once)"
            )

    # -- the world -----------------------------------------------------------------------------

    @rule(seconds=st.sampled_from(JUMPS))
    def time_passes(self, seconds: float) -> None:
        """The injected clock moves on; leases whose TTL ran out are gone from Redis, and the
        live sessions' heartbeats run meanwhile, each when it is due (see :meth:`_advance`)."""
        self._advance(seconds)

    def _redis_troubled(self) -> bool:
        leases = self.leases
        return leases.down or leases.fail_after is not None or leases.fail_at is not None

    @precondition(lambda self: not self._redis_troubled())
    @rule(after=st.integers(0, 4))
    def redis_goes_away(self, after: int) -> None:
        """Redis stops answering after ``after`` more calls (0: now; else mid-step)."""
        if not self.leases.down:
            self.leases.fail_after = after

    @rule(after=st.integers(0, 3), rounds=st.integers(1, 5), passes=st.booleans())
    def an_outage_lasts(self, after: int, rounds: int, passes: bool) -> None:
        """Redis goes away (after ``after`` more calls) for ``rounds`` heartbeat intervals,
        while heartbeats (and maybe reconciler passes) keep trying, then comes back."""
        self.redis_goes_away(after)
        for _ in range(rounds):
            self.time_passes(HEARTBEAT)
            if passes:
                self.reconcile(0)
        self.redis_comes_back()

    @rule(seconds=st.sampled_from((5.0, TTL, TTL + 1)))
    def a_pause_across_a_restart(self, seconds: float) -> None:
        """Every process stops for ``seconds`` (a host freeze) while Redis restarts without
        its data; then each overdue heartbeat runs at once."""
        self._advance(seconds, beating=False)
        self.redis_restarts_empty()
        self._advance(0.0)

    @precondition(lambda self: self._redis_troubled())
    @rule()
    def redis_comes_back(self) -> None:
        self.leases.down, self.leases.fail_after, self.leases.fail_at = False, None, None

    @rule()
    def redis_restarts_empty(self) -> None:
        self.leases.restart()

    @rule(which=st.integers(0, 1))
    def reconcile(self, which: int) -> None:
        self.reconcilers[which].run_once()

    @rule(
        seconds=st.sampled_from((TTL, TTL + GRACE)),
        outage_at=st.sampled_from(OUTAGES),
        owner=st.sampled_from(OWNERS),
        index=st.integers(0, 7),
    )
    def a_while_passes_under_the_reconciler(
        self, seconds: float, outage_at: str | None = None, owner: str = "beats", index: int = 0
    ) -> None:
        """A pass, the clock past TTL or TTL and grace, a pass, the grace, a pass: the
        reconciler suspects and confirms whatever lost its lease meanwhile. Before it, one
        owner may stop renewing (``owner``: it is paused, killed or cut off from Redis) or go
        on beating. Redis may stop answering exactly at the first ``outage_at`` question of
        those passes (between a pass's scan and admission's liveness check, say) and stays
        away."""
        live = self._actors(leased=True)
        if owner != "beats" and live:
            actor = live[index % len(live)]
            if owner == "killed":
                actor.gone(killed=True)
            else:
                setattr(actor, "paused" if owner == "paused" else "cut_off", True)
        if outage_at is not None and not self.leases.down:
            self.leases.fail_at = outage_at
        self.reconcile(0)
        self.time_passes(seconds)
        self.reconcile(1)
        self.time_passes(GRACE)
        self.reconcile(0)

    # -- people --------------------------------------------------------------------------------

    @precondition(lambda self: any(self.model.holds.values()))
    @rule(
        index=st.integers(0, 7),
        by=st.sampled_from(APPROVERS),
        effect=st.sampled_from(("present", "absent")),
    )
    def the_approver_reviews(
        self, index: int, by: str, effect: Literal["present", "absent"]
    ) -> None:
        self.review(index, by, effect)

    @precondition(lambda self: any(self.model.holds.values()))
    @rule(
        index=st.integers(0, 7),
        by=st.sampled_from(OTHERS),
        effect=st.sampled_from(("present", "absent")),
    )
    def someone_else_reviews(
        self, index: int, by: str, effect: Literal["present", "absent"]
    ) -> None:
        self.review(index, by, effect)

    def review(self, index: int, by: str, effect: Literal["present", "absent"]) -> None:
        """Someone states the effect of a held case; only the TASK's approver may (two rules,
        so that a held TASK meets both)."""
        held_tasks = [task for task, case in self.model.holds.items() if case]
        task_id = held_tasks[index % len(held_tasks)]
        with self.services.store.snapshot() as connection:
            task = tasks.get(connection, task_id)
            held = [
                c
                for c in cases.for_task(connection, task_id)
                if c.state is CaseState.OPEN and c.admission is Admission.HOLD_FOR_REVIEW
            ]
            if task is None or not held:
                return
            open_names = [
                op.name
                for op in operations.for_attempt(connection, held[0].interrupted_attempt_id)
                if unsettled(op)
            ]
        approver = by in approvers(task)
        before = None if approver else self._state(task_id)  # (an approver must not be refused)
        try:
            reviews.review(
                self.recovery.admitter,
                held[0].case_id,
                effect=effect,
                note="checked",
                actor=by,
                tenant=TENANT,
            )
        except NotAuthorized:
            if approver or self._state(task_id) != before:
                self.model.violations.append(f"the review by {by} was refused or half-written")
            return
        if not approver:
            self.model.violations.append(f"{by}, not an approver, reviewed {held[0].case_id}")
            return
        self.model.approved_reviews.add(held[0].case_id)
        if effect == "absent":
            self.model.licences.update((task_id, name) for name in open_names)

    @rule(index=st.integers(0, 7), by=st.sampled_from(ROLES))
    def recover(self, index: int, by: str) -> None:
        task_id = self._task(index)
        assert task_id is not None
        with self.services.store.snapshot() as connection:
            task = tasks.get(connection, task_id)
        assert task is not None
        approver = by in approvers(task)
        before = None if approver else self._state(task_id)  # (an approver must not be refused)
        try:
            self.recovery.recover(task_id, actor=by, tenant=TENANT)
        except NotAuthorized:
            if approver or self._state(task_id) != before:
                self.model.violations.append(f"the recover request of {by} was mishandled")

    # -- reading -------------------------------------------------------------------------------

    def _owned(self, actor: Actor) -> bool:
        with self.services.store.snapshot() as connection:
            mine = attempts.get(connection, actor.attempt_id)
            task = tasks.get(connection, actor.task_id)
        return (
            mine is not None
            and task is not None
            and mine.state is AttemptState.RUNNING
            and task.epoch == mine.number
        )

    def _state(self, task_id: str) -> tuple[object, ...]:
        """Everything a session write could change about a TASK (events aside)."""
        with self.services.store.snapshot() as connection:
            task = tasks.get(connection, task_id)
            assert task is not None
            return (
                (task.bucket, task.revision, task.epoch, task.hold),
                [
                    (a.attempt_id, a.state, a.agent_returned)
                    for a in attempts.for_task(connection, task_id)
                ],
                [(op.operation_id, op.state) for op in operations.for_task(connection, task_id)],
                len(reports.for_task(connection, task_id)),
                [(c.case_id, c.state, c.admission) for c in cases.for_task(connection, task_id)],
            )

    def _fenced_reasons(self, actor: Actor) -> list[str | None]:
        with self.services.store.snapshot() as connection:
            fenced = events.history(connection, actor.task_id, EventKind.STALE_OWNER_FENCED)
        return [event.reason for event in fenced if event.attempt_id == actor.attempt_id]

    # -- the invariants ------------------------------------------------------------------------

    @invariant()
    def protocol_holds(self) -> None:
        self.steps += 1
        assert not self.model.violations, self.model.violations
        self.model.stale.clear()
        with self.services.store.snapshot() as connection:
            for task_id in self.model.tasks:
                self._check_task(connection, task_id)
        self.leases.answers.clear()

    def _check_task(self, connection: Any, task_id: str) -> None:
        task = tasks.get(connection, task_id)
        assert task is not None
        every = attempts.for_task(connection, task_id)
        running = [a for a in every if a.state is AttemptState.RUNNING]
        owner = {a.attempt_id for a in running if a.number == task.epoch}
        self.model.stale.update(
            actor.number
            for actor in self._actors()
            if actor.task_id == task_id and actor.attempt_id not in owner
        )
        assert len(running) <= 1, f"{task_id} has {len(running)} running attempts"
        found = cases.for_task(connection, task_id)
        if task.bucket is Bucket.ACTIVE:
            assert running or task.hold or any(c.state is CaseState.OPEN for c in found), (
                f"{task_id} sits in active without a running attempt, an open case or a hold"
            )
        held_by = self.model.holds.get(task_id)
        if held_by is not None and task.hold is None:
            assert held_by in self.model.approved_reviews, (
                f"the hold of {task_id} (case {held_by}) ended without its approver's review"
            )
        self.model.holds[task_id] = task.hold.case_id if task.hold else None
        for case in found:
            self._check_decision(task_id, case)

    def _check_decision(self, task_id: str, case: Any) -> None:
        """A successor is admitted only on evidence: in the step that decided it, Redis
        answered, and not with the interrupted attempt as the lease's holder."""
        decision = (case.admission, case.decided_at)
        new = self.model.decisions.get(case.case_id) != decision
        self.model.decisions[case.case_id] = decision
        if not new or case.admission is not Admission.REEXECUTE:
            return
        asked = [holder for asked_for, holder in self.leases.answers if asked_for == task_id]
        answered = asked[-1] if asked else UNREACHABLE
        assert answered not in (UNREACHABLE, case.interrupted_attempt_id), (
            f"{task_id}: a successor was admitted for case {case.case_id} without Redis "
            f"answering that attempt {case.interrupted_epoch}'s lease is gone (asked: {asked})"
        )


def _debug_summary(machine: ProtocolMachine) -> str:
    with machine.services.store.snapshot() as connection:
        out = []
        for task_id in machine.model.tasks:
            t = tasks.get(connection, task_id)
            assert t is not None
            cs = cases.for_task(connection, task_id)
            out.append(
                f"{t.bucket.value} e{t.epoch} hold={bool(t.hold)} "
                f"att={[a.state.value for a in attempts.for_task(connection, task_id)]} "
                f"cases={[(c.admission.value if c.admission else None) for c in cs]}"
            )
    return (
        f"steps={machine.steps - 1} runs={len(machine.model.runs)} "
        f"reviews={len(machine.model.approved_reviews)} " + "; ".join(out)
    )
