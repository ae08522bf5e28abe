"""Shared CLI plumbing: options bound to env vars, output (rich or JSON), exit codes."""

from __future__ import annotations

import functools
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar, cast

import typer

from surehand.errors import (
    ConfigError,
    LifecycleError,
    NotFound,
    RecoveryError,
    SessionError,
    StoreMissing,
    StoreUnavailable,
    SurehandError,
    ValidationFailed,
)

if TYPE_CHECKING:  # imported by the commands that use them: `--help` and `surehand effect`
    # need neither pydantic-settings nor the store (tests/doors/test_cli_startup.py)
    from rich.console import Console

    from surehand.config import Settings
    from surehand.facade import Surehand

P = ParamSpec("P")
R = TypeVar("R")


class _Console:
    """A rich Console made when first used: a command that prints only JSON (``tasks --json``,
    ``surehand effect``) never imports rich."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def made(self) -> Console:
        """The rich Console itself (made now if it was not)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.made(), name)


console = cast("Console", _Console())
err_console = cast("Console", _Console(stderr=True))


def rich_console(handle: Console) -> Console:
    """The rich Console behind ``console`` or ``err_console``, for a rich API that takes one
    (``Live``): it renders through the Console's own attributes, not through a stand-in."""
    return handle.made() if isinstance(handle, _Console) else handle


# Exit codes scripts can branch on.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFLICT = 3  # write_task returned a conflict, or a compare-and-set lost
EXIT_NOT_FOUND = 4
EXIT_INVALID = 5  # bad input: nothing was written
EXIT_REFUSED = 6  # a lifecycle or authority rule refused the request
EXIT_RETRY = 75  # EX_TEMPFAIL: retry the same call later (store down, submission in progress)
EXIT_TIMEOUT = 124  # a wait (tasks --watch --until-bucket) ran out of time, like timeout(1)
EXIT_INTERRUPTED = 130  # a second Ctrl-C cut a shutdown short (128 + SIGINT)

DatabaseUrl = Annotated[
    str | None,
    typer.Option("--database-url", envvar="SUREHAND_DATABASE_URL", help="SQLAlchemy URL."),
]
Tenant = Annotated[
    str | None, typer.Option("--tenant", envvar="SUREHAND_TENANT", help="Tenant to act in.")
]
JsonFlag = Annotated[
    bool, typer.Option("--json", envvar="SUREHAND_JSON", help="Print machine-readable JSON.")
]
EmbeddedFlag = Annotated[
    bool,
    typer.Option(
        "--embedded",
        envvar="SUREHAND_EMBEDDED",
        help="Run without a shared broker or Redis: the in-process memory broker and fakeredis "
        "leases, which no other process sees (trials on one machine; `surehand up` runs so by "
        "default). Without it, a deployment command refuses to start unless "
        "SUREHAND_BROKER_URL / SUREHAND_REDIS_URL are set.",
    ),
]

# Why each deployment command needs each shared service (named in its refusal).
_NEEDS: dict[str, dict[str, str]] = {
    "worker": {
        "SUREHAND_BROKER_URL": "the broker its TASKs are queued on",
        "SUREHAND_REDIS_URL": "the Redis holding the session leases the reconciler checks",
    },
    "beat": {"SUREHAND_BROKER_URL": "the broker the workers take its reconciler passes from"},
    "api": {
        "SUREHAND_BROKER_URL": "the broker it publishes created TASKs to",
        "SUREHAND_REDIS_URL": "the Redis whose leases recover and review requests check",
    },
    "reconcile": {"SUREHAND_REDIS_URL": "the Redis holding the session leases it checks"},
}


def require_services(settings: Settings, command: str, *, embedded: bool) -> None:
    """Refuse to run deployment command ``command`` on in-process stand-ins (a memory broker
    nobody else consumes, fakeredis leases nobody else sees) unless ``--embedded`` says so.
    A worker also checks its metrics port before it starts (not once Celery is up, where a
    refusal would only be logged)."""
    if command == "worker" and settings.metrics_port:
        from surehand.metrics_port import check_port

        check_port(settings.metrics_host, settings.metrics_token)
    if embedded:
        return
    present = {
        "SUREHAND_BROKER_URL": bool(settings.broker_url)
        and not settings.broker_url.startswith("memory"),
        "SUREHAND_REDIS_URL": bool(settings.redis_url),
    }
    missing = {name: why for name, why in _NEEDS[command].items() if not present[name]}
    if not missing:
        return
    needs = "; ".join(f"{name} ({why})" for name, why in missing.items())
    raise ConfigError(
        f"surehand {command} is a deployment command and needs shared services: set {needs}. "
        "Or pass --embedded (SUREHAND_EMBEDDED=1) to run on in-process stand-ins that no other "
        "process sees; `surehand up` runs everything in one process that way",
        setting=next(iter(missing)),
        missing=list(missing),
    )


def existing_store_settings(database_url: str | None = None) -> Settings:
    """Settings for a command that only reads: StoreMissing, saying where it looked, when the
    SQLite file is not there (reading must never create a store or its directory)."""
    from surehand.config import Settings
    from surehand.store.engine import sqlite_file

    settings = Settings()
    if database_url is not None:
        settings = settings.model_copy(update={"database_url": database_url})
    path = sqlite_file(settings.resolved_database_url())
    if path is not None and not path.is_file():
        raise StoreMissing(
            f"no surehand store at {path.resolve()} ({_store_source(settings)}); run `surehand "
            "up` or `surehand db upgrade` first, or point SUREHAND_DATABASE_URL at the store",
            path=str(path.resolve()),
        )
    return settings


def _store_source(settings: Settings) -> str:
    if settings.database_url:
        return "from SUREHAND_DATABASE_URL / --database-url"
    return (
        f"the default under SUREHAND_HOME={settings.home}, relative to this directory; set "
        "SUREHAND_HOME or SUREHAND_DATABASE_URL to read another"
    )


def open_existing(database_url: str | None = None, tenant: str | None = None) -> Surehand:
    """A handle on an existing store, for read commands (see :func:`existing_store_settings`)."""
    from surehand.facade import Surehand  # imported when used: `--help` stays quick

    return Surehand(settings=existing_store_settings(database_url), tenant=tenant)


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


def emit_event(data: Any) -> None:
    """One compact JSON line, flushed at once (events of long-running commands)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def exit_code_for(error: SurehandError) -> int:
    if error.retryable:
        return EXIT_RETRY
    if isinstance(error, ValidationFailed):
        return EXIT_INVALID
    if isinstance(error, NotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, LifecycleError | RecoveryError | SessionError):
        return EXIT_REFUSED
    return EXIT_ERROR


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn a SurehandError into a one-line message (or JSON) and a meaningful exit code."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            try:
                return func(*args, **kwargs)
            except Exception as failed:
                refused = settings_error(failed)
                if refused is None:
                    raise
                raise refused from failed
        except SurehandError as error:
            if kwargs.get("as_json"):
                emit_json({"error": error.to_dict()})
            else:
                # Soft-wrapped (one line in a log, greppable) and escaped: a message quoting
                # "[::1]" or "[default]" is not rich markup.
                from rich.markup import escape

                message = escape(error.message)
                err_console.print(f"[bold red]error[/] ({error.code}): {message}", soft_wrap=True)
            raise typer.Exit(exit_code_for(error)) from None

    return wrapper


SETTINGS_MODEL = "Settings"  # surehand.config.Settings, named so as not to import it


def settings_error(failed: Exception) -> ConfigError | None:
    """A SUREHAND_* variable pydantic refused, as a ConfigError naming each one (never its
    value, which may be a secret); None for any other error."""
    core = sys.modules.get("pydantic_core")  # not loaded: nothing validated anything
    if core is None or not isinstance(failed, core.ValidationError):
        return None
    invalid = failed
    if invalid.title != SETTINGS_MODEL:
        return None
    problems = [
        (f"SUREHAND_{'_'.join(str(part) for part in item['loc']).upper()}", item["msg"])
        for item in invalid.errors()
    ]
    return ConfigError(
        "invalid setting: "
        + "; ".join(f"{name}: {message}" for name, message in problems)
        + ". Fix the environment variable (or the option that sets it)",
        setting=problems[0][0],
    )


def invoked_as() -> str:
    """How to run this ``surehand`` again from the current directory, for hints: ``surehand``
    when that is what PATH finds, else the path that was run (``.venv/bin/surehand``), else
    ``python -m surehand`` with this interpreter."""
    ran = Path(sys.argv[0])
    if ran.name != "surehand":
        return f"{sys.executable} -m surehand"
    found = shutil.which("surehand")
    if found is not None and Path(found).resolve() == ran.resolve():
        return "surehand"
    absolute = ran.absolute()
    return (
        str(absolute.relative_to(Path.cwd()))
        if absolute.is_relative_to(Path.cwd())
        else (str(absolute))
    )


def wait_for_store(sh: Surehand, what: str) -> None:
    """Check the store's schema, waiting out a database that is restarting or refusing
    connections for a moment (``SUREHAND_STARTUP_WAIT_SECONDS``): a supervisor that starts
    workers beside the database, or restarts one during a failover, should not need to retry.
    A configuration mistake (missing database, refused login) fails at once."""
    while_starting(sh, what, sh.store.ensure_schema)


def while_starting(sh: Surehand, what: str, call: Callable[[], R]) -> R:
    """``call()``, retried with back-off while the store is unavailable in a retryable way,
    for at most ``SUREHAND_STARTUP_WAIT_SECONDS``; anything else is raised at once."""
    deadline = time.monotonic() + sh.settings.startup_wait_seconds
    delay = 0.25
    while True:
        try:
            return call()
        except StoreUnavailable as error:
            if not error.retryable or time.monotonic() + delay > deadline:
                raise
            err_console.print(f"{what}: waiting for the database ({error}); retrying", markup=False)
            time.sleep(delay)
            delay = min(delay * 2, 4.0)
