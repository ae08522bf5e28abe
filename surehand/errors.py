"""The exception tree: one root, ``SurehandError``, and a typed sub-root per subsystem.

Every error carries a machine-readable ``code`` (stable, snake_case) and a message that tells
the user what to do next. Front doors map these to HTTP status codes, MCP errors and CLI exit
codes; nothing else leaks past them. ``retryable`` says whether the same call may succeed later
unchanged (a database outage, a submission still in progress).
"""

from __future__ import annotations

from typing import Any, ClassVar


class SurehandError(Exception):
    """Something surehand refused or could not do. The message says what to do next."""

    code: ClassVar[str] = "surehand_error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str | None = None, **details: Any) -> None:
        super().__init__(message or (self.__doc__ or self.code).strip().splitlines()[0])
        self.details: dict[str, Any] = details

    @property
    def message(self) -> str:
        return str(self.args[0])

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape every front door returns for this error."""
        return {**self.details, "code": self.code, "message": self.message}


# --- configuration --------------------------------------------------------------------------


class ConfigError(SurehandError):
    """A setting is missing or wrong; fix the SUREHAND_* environment variable it names."""

    code = "config_error"


# --- input validation -----------------------------------------------------------------------


class ValidationFailed(SurehandError, ValueError):
    """A request field is invalid; nothing was written. Fix the named field and resend."""

    code = "invalid_request"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", field=field)
        self.field = field


# --- store ----------------------------------------------------------------------------------


class StoreError(SurehandError):
    """The task store failed."""

    code = "store_error"


class StoreUnavailable(StoreError):
    """The database could not be reached or timed out. A transaction it cut off was rolled
    back, unless its commit landed and only the reply was lost; retry later (surehand's own
    writes are safe to repeat)."""

    code = "store_unavailable"
    retryable = True


class SchemaNotReady(StoreError):
    """The database schema is missing or old: run `surehand db upgrade`."""

    code = "schema_not_ready"


class DatabaseUnreachable(StoreUnavailable):
    """The database server could not be reached (refused, unknown host, timed out): check the
    host and port in SUREHAND_DATABASE_URL and that the server runs, then retry."""


class DatabaseBusy(StoreUnavailable):
    """The database has no free connection slot (too many connections); retry later, or lower
    SUREHAND_DATABASE_POOL_SIZE / the number of processes, or raise max_connections."""


class DatabaseMissing(StoreUnavailable, ConfigError):
    """The database server answers but the database SUREHAND_DATABASE_URL names does not exist:
    create it or fix the name, then run `surehand db upgrade`. Retrying will not help.

    A ``StoreUnavailable`` too, so a running session that meets it stops as interrupted (its
    effects judged from the record) instead of failing its TASK."""

    code = "database_missing"
    retryable = False


class DatabaseAuthFailed(StoreUnavailable, ConfigError):
    """The database refused the login: fix the user and password in SUREHAND_DATABASE_URL (or
    the server's pg_hba.conf). Retrying will not help."""

    code = "database_auth_failed"
    retryable = False


class BadDatabaseUrl(ConfigError):
    """SUREHAND_DATABASE_URL is not a URL surehand can use: write sqlite:///path/file.sqlite3 or
    postgresql+psycopg://user:password@host:5432/dbname."""

    code = "bad_database_url"


class StoreMissing(ConfigError):
    """There is no surehand store where this command looked (read commands never create one):
    run `surehand up` or `surehand db upgrade` first, or point SUREHAND_DATABASE_URL at it."""

    code = "store_missing"


class NotFound(StoreError, LookupError):
    """The named record does not exist (or belongs to another tenant)."""

    code = "not_found"


class TaskNotFound(NotFound):
    """No such TASK in this tenant; check the task_id (`surehand tasks` lists them)."""

    code = "task_not_found"


class ReceiptNotFound(NotFound):
    """No submission with this client_submission_id in this tenant."""

    code = "submission_not_found"


class CaseNotFound(NotFound):
    """No such interruption case; `surehand cases` lists them."""

    code = "case_not_found"


# --- lifecycle ------------------------------------------------------------------------------


class LifecycleError(SurehandError):
    """A lifecycle rule refused the request."""

    code = "lifecycle_error"


class IllegalTransition(LifecycleError):
    """This move between buckets is not allowed; see the lifecycle table in docs/lifecycle.md."""

    code = "illegal_transition"


class NotAuthorized(LifecycleError, PermissionError):
    """The acting role may not do this; ask the task's approver (PM or ADMIN)."""

    code = "not_authorized"


class ReportRejected(LifecycleError):
    """The REPORT was refused (wrong reporter, recipient, or task state); nothing was written."""

    code = "report_rejected"


class TaskHeld(LifecycleError):
    """The TASK is held for review after an interruption; an approver must review its case."""

    code = "task_held"


class Conflict(SurehandError):
    """A compare-and-set lost against a concurrent change; re-read and retry."""

    code = "conflict"
    retryable = True


# --- sessions and fencing -------------------------------------------------------------------


class SessionError(SurehandError):
    """A session could not run or write."""

    code = "session_error"


class StaleOwner(SessionError):
    """This session's attempt is no longer the TASK's current running attempt; its write was
    fenced and recorded, not applied. Stop the session."""

    code = "stale_owner"


class NotClaimable(SessionError):
    """The TASK is not claimable (already claimed, held, or not in inbox)."""

    code = "not_claimable"


class RolePaused(NotClaimable):
    """The TASK's role is paused: no session of it starts until ``surehand resume ROLE``."""

    code = "role_paused"


class LeaseLost(SessionError):
    """The session's Redis lease could not be renewed; the session stops without settling."""

    code = "lease_lost"


class LeaseUnavailable(SessionError):
    """Redis could not be reached for a lease operation. Retry when Redis is back."""

    code = "lease_unavailable"
    retryable = True


class SessionInterrupted(SessionError):
    """The runtime could not record or renew this session's work (store or Redis unavailable
    past bounded retries): the session stops without settling, its attempt is interrupted, not
    failed, and admission decides from the recorded effect facts what a successor may do. An
    effect may have run without its outcome recorded; nothing is repeated blindly."""

    code = "session_interrupted"

    def __init__(self, message: str, *, cause: str, **details: Any) -> None:
        super().__init__(message, cause=cause, **details)
        self.cause = cause


class NoSpaceForSessions(SessionError):
    """The work directory's file system is below the free space or files this worker keeps:
    it starts no session and claims nothing; the TASK waits in inbox for later or for another
    worker. Free space there (or lower SUREHAND_WORK_DIR_MIN_FREE_MIB)."""

    code = "no_space_for_sessions"
    retryable = True


class OperationFailed(SessionError):
    """An operation's effect raised; its failure is recorded as the operation's outcome."""

    code = "operation_failed"


class SessionLimitReached(SessionError):
    """A session asked its session server for more than its limits allow (REPORT revisions,
    operations or bytes); nothing was written. The message names the limit and its setting."""

    code = "session_limit"

    def __init__(self, message: str, *, limit: str, **details: Any) -> None:
        super().__init__(message, limit=limit, **details)
        self.limit = limit


class SessionRateLimited(SessionLimitReached):
    """A session called its session server more often than its rate allows; nothing was
    written. The same call may succeed after ``retry_after`` seconds."""

    retryable = True


# --- queue ----------------------------------------------------------------------------------


class QueueError(SurehandError):
    """The broker or worker layer failed."""

    code = "queue_error"


class PublishFailed(QueueError):
    """The TASK was committed but could not be published; the dispatcher sweep will retry."""

    code = "publish_failed"
    retryable = True


# --- recovery -------------------------------------------------------------------------------


class RecoveryError(SurehandError):
    """Recovery admission refused or could not run."""

    code = "recovery_error"


class StaleDecision(RecoveryError):
    """The case was decided on an older task revision; it must be re-evaluated."""

    code = "stale_decision"
    retryable = True


# --- agents ---------------------------------------------------------------------------------


class AgentError(SurehandError):
    """An agent handler is missing or misconfigured."""

    code = "agent_error"


class EffectLeftOpen(AgentError):
    """The agent returned while an effect it began (``effect_begin``) had no outcome recorded:
    whether it happened is unknown, so the attempt is not settled but held for review."""

    code = "effect_left_open"


class AgentOutputRefused(AgentError):
    """An agent program's output could not be read safely (not a regular file, a link, a FIFO,
    or larger than allowed); the session ends without reading it and the TASK is held."""

    code = "agent_output_refused"


class SandboxError(AgentError):
    """The sandbox or the limits of an agent program could not be set up; nothing ran."""

    code = "sandbox_error"


class NoAgentForRole(AgentError):
    """No agent handler is registered for this recipient role; register one with
    `@sh.agent("ROLE")` or SUREHAND_AGENTS."""

    code = "no_agent_for_role"


# --- auth (front doors) ---------------------------------------------------------------------


class AuthError(SurehandError):
    """The caller is not authenticated or not allowed."""

    code = "unauthorized"


class Forbidden(AuthError, PermissionError):
    """The caller's principal may not do this."""

    code = "forbidden"


class TooManyAttempts(AuthError):
    """Too many failed sign-ins or unknown tokens from this client; wait and try again."""

    code = "too_many_attempts"
    retryable = True


class TooManyRequests(SurehandError):
    """This principal asked for too much too fast (a rate limit); wait ``retry_after`` seconds."""

    code = "too_many_requests"
    retryable = True


class DuplicateKey(StoreError):
    """A unique constraint refused a row (used by the service layer to converge races)."""

    code = "duplicate_key"

    def __init__(self, table: str, message: str | None = None) -> None:
        super().__init__(message or f"duplicate row in {table}", table=table)
        self.table = table
