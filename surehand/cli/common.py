"""Shared CLI plumbing: options bound to env vars, output (rich or JSON), exit codes."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from surehand.errors import (
    LifecycleError,
    NotFound,
    RecoveryError,
    SessionError,
    SurehandError,
    ValidationFailed,
)

P = ParamSpec("P")
R = TypeVar("R")

console = Console()
err_console = Console(stderr=True)

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
            return func(*args, **kwargs)
        except SurehandError as error:
            if kwargs.get("as_json"):
                emit_json({"error": error.to_dict()})
            else:
                err_console.print(f"[bold red]error[/] ({error.code}): {error.message}")
            raise typer.Exit(exit_code_for(error)) from None

    return wrapper
