"""``surehand db upgrade`` and ``surehand fcop export``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from surehand.cli.app import db_app, fcop_app
from surehand.cli.common import (
    DatabaseUrl,
    JsonFlag,
    Tenant,
    console,
    emit_json,
    handle_errors,
    open_existing,
    while_starting,
)

if TYPE_CHECKING:  # imported by the commands that use them (CLI start-up time)
    from surehand.facade import Surehand


@db_app.command("upgrade")
@handle_errors
def db_upgrade(database_url: DatabaseUrl = None, as_json: JsonFlag = False) -> None:
    """Apply pending schema migrations (safe to run from several processes at once).

    Waits out a database that is still starting (SUREHAND_STARTUP_WAIT_SECONDS), as a one-shot
    deployment job started beside it needs, and says whether anything was applied: a second
    run finds the work done."""
    from surehand.facade import Surehand

    sh = Surehand(database_url=database_url)
    before = current_when_reachable(sh, "db upgrade")
    revision = sh.upgrade()
    if as_json:
        emit_json(
            {
                "database": sh.store.describe(),
                "revision": revision,
                "previous": before,
                "applied": before != revision,
            }
        )
    elif before == revision:
        console.print(
            f"database {sh.store.describe()} is at migration [bold]{revision}[/]: done already"
        )
    else:
        console.print(
            f"database {sh.store.describe()} is at migration [bold]{revision}[/] "
            f"(upgraded from {before or 'an empty database'})"
        )


def current_when_reachable(sh: Surehand, what: str) -> str | None:
    """The database's migration, retrying while the server refuses or is unreachable."""
    from surehand.dispatcher import health

    return while_starting(sh, what, lambda: health.schema_revision(sh.services))


@db_app.command("current")
@handle_errors
def db_current(database_url: DatabaseUrl = None, as_json: JsonFlag = False) -> None:
    """Show the database's migration and the newest one this version ships."""
    from surehand.dispatcher import health

    sh = open_existing(database_url)
    current = health.schema_revision(sh.services)
    head = health.newest_revision()
    if as_json:
        emit_json({"current": current, "head": head, "up_to_date": current == head})
    else:
        console.print(f"current {current or '(empty)'}, newest {head}")


@fcop_app.command("export")
@handle_errors
def fcop_export(
    directory: Annotated[Path, typer.Argument(help="Workspace root; writes DIR/fcop/...")],
    database_url: DatabaseUrl = None,
    tenant: Tenant = None,
    as_json: JsonFlag = False,
) -> None:
    """Write (or rebuild) the FCoP mirror: fcop/_lifecycle/<bucket>/ and fcop/reports/."""
    from surehand.fcop.export import export_workspace

    sh = open_existing(database_url, tenant)
    summary = export_workspace(sh.store, directory, tenant=sh.tenant)
    if as_json:
        emit_json({"tasks": summary.tasks, "reports": summary.reports, "removed": summary.removed})
    else:
        console.print(
            f"exported {summary.tasks} TASK(s) and {summary.reports} REPORT(s) to "
            f"{directory / 'fcop'} ({summary.removed} stale file(s) removed)"
        )
