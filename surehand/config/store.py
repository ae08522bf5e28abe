"""Settings of the store, the leases and the broker, and how often the dispatcher's loops run.

The embedded default needs none of them: a SQLite file under ``./.surehand/``, the in-process
memory broker and fakeredis for leases. A deployment sets the three URLs.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

DEFAULT_HOME = Path(".surehand")


def default_database_url(home: Path = DEFAULT_HOME) -> str:
    return f"sqlite:///{home / 'surehand.sqlite3'}"


class StoreSettings(BaseModel):
    """Where TASKs are kept, leased and published, and the dispatcher's periods."""

    home: Path = Field(DEFAULT_HOME, description="Directory for the embedded SQLite file.")
    database_url: str = Field("", description="SQLAlchemy URL; default SQLite under home.")
    database_pool_size: int = Field(
        10,
        ge=1,
        le=1000,
        description="Postgres connections each of the store's three pools opens at most per "
        "process (as needed, then kept), whatever the process's concurrency: a process holds "
        "at most 3 x this many. A thread that finds every one in use waits for one (see "
        "database_pool_timeout_seconds); sessions touch the database in short bursts, so a few "
        "connections serve many sessions. SQLite keeps this many and opens more without waiting.",
    )
    database_pool_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a thread waits for one of its pool's Postgres connections when "
        "all are in use; past it the call fails with StoreUnavailable (retryable), saying the "
        "pool was exhausted: raise database_pool_size (and Postgres' max_connections) then.",
    )
    redis_url: str = Field("", description="Redis for leases; empty means in-process fakeredis.")
    redis_namespace: str = Field(
        "", description="Prefix for surehand's Redis keys (to share one Redis database)."
    )
    broker_url: str = Field(
        "",
        description="Celery broker. Empty: writers publish nothing and `surehand up` picks new "
        "TASKs up with its sweep over the in-process memory transport.",
    )
    tenant: str = Field("default", description="Tenant for Python/CLI calls.")
    lease_ttl_seconds: float = Field(30.0, gt=0, description="Session lease TTL.")
    heartbeat_seconds: float = Field(10.0, gt=0, description="Lease renewal interval.")
    reconcile_interval_seconds: float = Field(5.0, gt=0, description="Reconciler period.")
    lost_grace_seconds: float = Field(
        15.0,
        ge=0,
        description="A lease missing this long means the session is lost; keep it above the "
        "heartbeat interval so a Redis restart is never mistaken for a loss.",
    )
    republish_after_seconds: float = Field(
        300.0,
        gt=0,
        description="Publish a TASK again if it is still unclaimed in inbox this long after its "
        "last publish (a lost message never strands it; duplicates are harmless).",
    )
    sweep_interval_seconds: float = Field(1.0, gt=0, description="Dispatcher sweep period.")
    startup_wait_seconds: float = Field(
        30.0,
        ge=0,
        description="How long worker, api and `db upgrade` wait at start for a database that is "
        "restarting or still starting.",
    )
    # Accepted so that existing configurations keep loading; the receipt stages they tuned
    # are gone (migration 0019).
    submission_wait_seconds: float = Field(
        5.0,
        ge=0,
        description="No effect (kept so that existing configurations load): a receipt is "
        "committed with its TASK, so a concurrent write_task waits on the database for the "
        "first commit and answers reused; it never answers in_progress.",
    )
    submission_hold_seconds: float = Field(
        30.0,
        gt=0,
        description="No effect (kept so that existing configurations load): no caller holds "
        "a submission; a receipt is committed with its TASK.",
    )
    stalled_after_seconds: float = Field(
        300.0,
        gt=0,
        description="No effect (kept so that existing configurations load): every receipt is "
        "committed with its TASK, so none stalls.",
    )

    def resolved_database_url(self) -> str:
        return self.database_url or default_database_url(self.home)
