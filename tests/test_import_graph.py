"""Dependencies point one way: no import loop between surehand's modules or its rooms, and the
lower rooms never reach up (the store speaks SQL for everyone and imports none of them)."""

from __future__ import annotations

from pathlib import Path

import pytest

import surehand
from tests.import_graph import loop_in, module_graph, room_graph

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
