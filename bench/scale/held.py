"""Many long sessions held at once by one ``surehand worker`` (``bench/scale/run.py`` runs it).

``held(Spec(...), admin_url)`` starts one ``surehand worker --pool POOL --concurrency N`` on
Postgres (its own database) and a private ``redis-server``, submits ``sessions`` TASKs whose
agent waits ``hold`` seconds, and measures while they are all running:

* sessions running at once and leases lost (attempts that did not succeed);
* memory and threads, from ``/proc``: the worker process itself and, separately, its
  descendants (prefork's pool processes; a command agent's trampoline, sandbox and program),
  each as RSS and PSS (PSS splits pages shared after a fork between the processes sharing
  them, so summing it over a prefork pool does not count the parent's pages once per child);
* Redis commands and CPU a second (the bench's own ``PTTL`` sampling left out), Postgres
  connections of the database, the reconciler's pass time;
* heartbeat jitter: every ``sample_every`` seconds the bench reads the ``PTTL`` of every
  session's lease key in one pipeline; a renewal sets the TTL back to the full lease TTL, so
  ``now - (ttl - pttl)`` is when the key was last set (to within half the pipeline's round
  trip, reported as ``sample_error_ms_max``). The intervals between consecutive sets of one
  key, minus the configured heartbeat, are the renewals' lateness.

Agents: ``python`` is ``agents:sleeping`` (in the worker's pool thread or process);
``command`` is the built-in ``command`` agent running ``sh -c 'sleep HOLD; echo slept'`` under
``SUREHAND_AGENT_SANDBOX`` (``none`` or ``auto``: bubblewrap where the host allows it).
"""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.common.procs import stop_group
from bench.scale.deploy import deployment, launch
from bench.scale.probes import AGENTS_MODULE
from bench.scale.usage import LeaseSampler, by_name, descendants, tree_usage

SCALE_DATABASE = "surehand_bench_scale"
PATCHED = (
    "from gevent import monkey; monkey.patch_all(); import sys; "
    "sys.argv[0] = 'surehand'; from surehand.cli import main; main()"
)
AGENTS = {"python": f"DEV={AGENTS_MODULE}:sleeping", "command": "DEV=command"}


@dataclass(frozen=True)
class Spec:
    """One held run: how many sessions, which agent, which pool."""

    sessions: int
    hold: float
    agent: str = "python"
    pool: str = "threads"
    concurrency: int | None = None  # default: ``sessions``
    sandbox: str = "none"
    sample_every: float = 1.0

    def env(self) -> dict[str, str]:
        extra = {"SUREHAND_AGENT_SANDBOX": self.sandbox}
        if self.agent == "command":
            script = f"sleep {self.hold:g}; echo slept"
            extra["SUREHAND_COMMAND_AGENT"] = shlex.join(["sh", "-c", script])
        return extra


def worker(here: Any, spec: Spec, name: str) -> Any:
    """``surehand worker`` with ``spec``'s pool and concurrency, serving DEV."""
    argv = [sys.executable, "-m", "surehand", "worker", "--roles", "DEV"]
    if spec.pool == "gevent-patched":  # what celery's own CLI does for -P gevent, first of all
        argv[1:3] = ["-c", PATCHED]
    pool = spec.pool.removesuffix("-patched")
    argv += ["--pool", pool, "--concurrency", str(spec.concurrency or spec.sessions)]
    argv += ["--hostname", f"{name}@%h"]
    env = {**here.env, **spec.env()}
    return launch(argv, env, here.tmp / f"{name}.log", "ready.")


def held(spec: Spec, admin_url: str) -> dict[str, Any]:
    """Hold ``spec.sessions`` sleeping sessions in one worker; what they cost (see module)."""
    with deployment(admin_url, AGENTS[spec.agent], database=SCALE_DATABASE) as here:
        name = f"held-{spec.agent}-{spec.pool}-{spec.sessions}"
        try:
            process = worker(here, spec, name)
        except SystemExit as failed:  # e.g. a pool that cannot start: say how it failed
            return {**describe(spec), "error": str(failed)[-3000:]}
        try:
            return {**describe(spec), **measure(here, spec, process, admin_url)}
        except Exception as failed:  # a run that broke (e.g. Postgres out of connections)
            tail = log_tail(here, spec, 0)
            return {**describe(spec), "error": f"{type(failed).__name__}: {failed}", **tail}
        finally:
            stop_group(process)


def describe(spec: Spec) -> dict[str, Any]:
    return {
        "sessions": spec.sessions,
        "hold_seconds": spec.hold,
        "agent": spec.agent,
        "pool": spec.pool,
        "concurrency": spec.concurrency or spec.sessions,
        "sandbox": spec.sandbox,
        "workers": 1,
    }


def measure(here: Any, spec: Spec, process: Any, admin_url: str) -> dict[str, Any]:
    import redis

    from surehand.queue.keys import lease_key

    sh, server = here.sh, here.server
    time.sleep(2.0)  # let the pool settle (prefork forks its children after "ready.")
    idle = tree_usage(process.pid)
    submitted = time.monotonic()
    ids = [
        str(
            sh.write_task(
                sender="PM", recipient="DEV", subject=f"wait {n}", body=str(spec.hold)
            ).task_id
        )
        for n in range(spec.sessions)
    ]
    ttl_ms = int(sh.settings.lease_ttl_seconds * 1000)
    namespace = sh.settings.redis_namespace
    sampler = LeaseSampler(
        redis.Redis(port=server.port, db=1),
        [lease_key(i, namespace) for i in ids],
        ttl_ms,
        spec.sample_every,
    )
    sampler.thread.start()
    try:
        return observe(here, spec, process, idle, sampler, submitted, admin_url)
    finally:
        sampler.stop.set()
        sampler.thread.join()


def observe(
    here: Any,
    spec: Spec,
    process: Any,
    idle: dict[str, int],
    sampler: LeaseSampler,
    t0: float,
    admin_url: str,
) -> dict[str, Any]:
    sh, server = here.sh, here.server
    deadline = t0 + spec.hold
    while count_attempts(sh).get("running", 0) < spec.sessions and time.monotonic() < deadline:
        time.sleep(0.5)
    running = count_attempts(sh).get("running", 0)
    all_running_s = round(time.monotonic() - t0, 1)
    window = 10.0
    stats, cpu = server.commandstats(), server.cpu_seconds()
    time.sleep(window)
    commands = server.commandstats()
    commands.subtract(stats)
    commands.pop("pttl", None)  # the bench's own sampling
    cpu = server.cpu_seconds() - cpu
    held = tree_usage(process.pid)  # after the first renewals: heartbeat threads started
    processes = by_name(descendants(process.pid))
    connections = postgres_connections(admin_url)
    passes = []
    for _ in range(3):
        started = time.perf_counter()
        sh.reconciler.run_once()
        passes.append((time.perf_counter() - started) * 1000)
    while count_attempts(sh).get("running", 0) and time.monotonic() < deadline + 180:
        time.sleep(1.0)
    states = count_attempts(sh)
    sampler.stop.set()
    sampler.thread.join()
    return {
        "running_at_once": running,
        "seconds_to_all_running": all_running_s,
        "attempt_states": states,
        "leases_lost": sum(n for state, n in states.items() if state != "succeeded"),
        **log_tail(here, spec, running),
        **costs(idle, held, running),
        "children_by_name_held": processes,
        "redis_commands_per_second": round(sum(commands.values()) / window, 1),
        "redis_cpu_percent": round(cpu / window * 100, 2),
        "postgres_connections": connections[0] if isinstance(connections, tuple) else connections,
        "postgres_connections_server": connections[1] if isinstance(connections, tuple) else None,
        "reconciler_pass_ms": round(min(passes), 2),
        "heartbeat_jitter": sampler.jitter(sh.settings.heartbeat_seconds),
    }


def costs(idle: dict[str, int], held: dict[str, int], running: int) -> dict[str, Any]:
    """Memory and threads idle and held; per session over the idle worker."""

    def mib(kib: float) -> float:
        return round(kib / 1024, 1)

    def each(key: str) -> float | None:
        return round((held[key] - idle[key]) / 1024 / running, 3) if running else None

    total = {
        moment: {
            "rss_kib": usage["rss_kib"] + usage["children_rss_kib"],
            "pss_kib": usage["pss_kib"] + usage["children_pss_kib"],
            "threads": usage["threads"] + usage["children_threads"],
        }
        for moment, usage in (("idle", idle), ("held", held))
    }
    return {
        "worker_rss_mib_idle": mib(idle["rss_kib"]),
        "worker_rss_mib_held": mib(held["rss_kib"]),
        "rss_mib_per_session": each("rss_kib"),  # the worker process alone
        "children_idle": idle["children"],
        "children_held": held["children"],
        "children_rss_mib_idle": mib(idle["children_rss_kib"]),
        "children_rss_mib_held": mib(held["children_rss_kib"]),
        "children_pss_mib_held": mib(held["children_pss_kib"]),
        "children_rss_mib_per_session": each("children_rss_kib"),
        "children_pss_mib_per_session": each("children_pss_kib"),
        "total_pss_mib_idle": mib(total["idle"]["pss_kib"]),
        "total_pss_mib_held": mib(total["held"]["pss_kib"]),
        "total_pss_mib_per_session": round(
            (total["held"]["pss_kib"] - total["idle"]["pss_kib"]) / 1024 / running, 3
        )
        if running
        else None,
        "total_pss_mib_held_per_session": round(total["held"]["pss_kib"] / 1024 / running, 3)
        if running
        else None,
        "threads_idle": idle["threads"],
        "threads_held": held["threads"],
        "threads_per_session": round((held["threads"] - idle["threads"]) / running, 2)
        if running
        else None,
        "all_threads_held": total["held"]["threads"],
        "processes_held": 1 + held["children"],
    }


def count_attempts(sh: Any) -> dict[str, int]:
    """Attempts by state, from the store."""
    from sqlalchemy import func, select

    from surehand.store.schema import attempts

    query = select(attempts.c.state, func.count()).group_by(attempts.c.state)
    with sh.store.engine.connect() as connection:
        return {str(state): int(n) for state, n in connection.execute(query)}


def postgres_connections(admin_url: str) -> tuple[int, int] | str:
    """Connections open to the bench's database and to the whole server now (what failed, if
    it cannot be asked)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    engine = create_engine(admin_url)
    try:
        with engine.connect() as connection:
            found = connection.execute(
                text(
                    "SELECT count(*) FILTER (WHERE datname = :db), count(*) FROM pg_stat_activity"
                    " WHERE backend_type = 'client backend'"
                ),
                {"db": SCALE_DATABASE},
            ).one()
    except OperationalError as failed:  # the server shared with other work may be full
        return str(failed.orig).strip().splitlines()[-1]
    finally:
        engine.dispose()
    return int(found[0]), int(found[1])


def log_tail(here: Any, spec: Spec, running: int) -> dict[str, str]:
    """The worker log's last lines when not every session ran (how it failed)."""
    if running >= spec.sessions:
        return {}
    log = here.tmp / f"held-{spec.agent}-{spec.pool}-{spec.sessions}.log"
    return {"worker_log_tail": log.read_text(errors="replace")[-4000:]}
