"""Dependencies point one way: no import loop between surehand's modules or its rooms, and the
lower rooms never reach up (the store speaks SQL for everyone and imports none of them)."""

from __future__ import annotations

from pathlib import Path

import pytest

import surehand
from tests.import_graph import loop_in, module_graph, room, room_graph

PACKAGE = Path(surehand.__file__).parent

# What each lower room must never import, lazily or not (the rooms above it).
NEVER = {
    "surehand.store": {"surehand.dispatcher", "surehand.agents", "surehand.queue"},
    "surehand.queue": {"surehand.dispatcher", "surehand.agents", "surehand.facade"},
    "surehand.agents": {"surehand.dispatcher", "surehand.mcp", "surehand.facade"},
    "surehand.dispatcher": {"surehand.mcp", "surehand.api", "surehand.ui", "surehand.facade"},
    "surehand.mcp": {"surehand.api", "surehand.ui", "surehand.cli"},
    "surehand.runtime": {"surehand.facade", "surehand.api", "surehand.ui", "surehand.cli"},
    "surehand.doors": {"surehand.dispatcher", "surehand.facade", "surehand.runtime"},
}


# The doors: every way in, which parse, call the service layer and render
# (and what the network doors share: problems, auth, limits).
DOORS = ("surehand.facade", "surehand.api", "surehand.mcp", "surehand.cli", "surehand.ui")
DOORS_SHARED = "surehand.doors"

# The store's modules a door may still import, and why (the package itself, ``surehand.store``,
# is always allowed: the ``Store`` type, built where a door needs one without a runtime, as
# ``surehand check`` does, and ``describe_url``, which hides a URL's secrets).
STORE_EXCEPTIONS = {
    # Where the embedded SQLite file is, asked before any store is opened: a command that only
    # reads must never create a store or its directory, and `check` says when there is none.
    "surehand.cli.common": {"surehand.store.engine"},
    "surehand.cli.check_command": {"surehand.store.engine"},
}


def test_the_doors_read_and_write_through_the_service_layer_not_the_stores_modules() -> None:
    """A door (the Python handle, HTTP, MCP, the CLI, the console) reads through
    ``surehand.dispatcher.queries`` and ``health`` as it writes through the other service
    calls: it imports none of the store's modules (``surehand.store.tasks``, ``.listing``, ...),
    only the ``surehand.store`` package, and the exceptions in STORE_EXCEPTIONS."""
    graph = module_graph(PACKAGE)
    reaching = {
        (module, imported)
        for module, imports in graph.items()
        if room(module) in (*DOORS, DOORS_SHARED)
        for imported in imports
        if imported.startswith("surehand.store.")
        and imported not in STORE_EXCEPTIONS.get(module, set())
    }
    assert reaching == set()


def test_no_module_imports_itself_through_others() -> None:
    assert loop_in(module_graph(PACKAGE)) is None


def test_no_room_imports_itself_through_others() -> None:
    assert loop_in(room_graph(module_graph(PACKAGE))) is None


@pytest.mark.parametrize("lower", sorted(NEVER))
def test_a_lower_room_never_imports_the_rooms_above_it(lower: str) -> None:
    rooms = room_graph(module_graph(PACKAGE))
    assert rooms[lower] & NEVER[lower] == set()


def test_a_lazy_import_closes_a_loop_and_a_type_checking_import_does_not(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "base.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import top\n"
    )
    (package / "top.py").write_text("from pkg.low import base\n")
    assert loop_in(room_graph(module_graph(package))) is None

    (package / "low" / "base.py").write_text("def f():\n    from pkg.top import g\n")
    assert loop_in(room_graph(module_graph(package))) is not None
    assert loop_in(module_graph(package)) is not None
