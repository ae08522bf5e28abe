"""The import graph of a package, as the layering rules read it.

Every import of the package's own modules counts -- at module level and inside functions (a
lazy import is still a dependency) -- except those in ``if TYPE_CHECKING:`` blocks, which never
run. A room is a subpackage (``surehand.store``) or a top-level module (``surehand.facade``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

Graph = dict[str, set[str]]


def modules(root: Path) -> dict[str, Path]:
    """Dotted module names of the package at ``root`` and their files."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def module_graph(root: Path) -> Graph:
    """Each module's imports of the package's own modules."""
    known = modules(root)
    return {name: _imports(name, path, set(known)) for name, path in known.items()}


def room_graph(graph: Graph) -> Graph:
    """The module graph folded into rooms (edges inside one room dropped)."""
    rooms: Graph = {room(name): set() for name in graph}
    for name, imported in graph.items():
        rooms[room(name)] |= {room(other) for other in imported} - {room(name)}
    return rooms


def room(module: str) -> str:
    """``surehand.store.tasks`` -> ``surehand.store``; ``surehand`` stays ``surehand``."""
    return ".".join(module.split(".")[:2])


def loop_in(graph: Graph) -> list[str] | None:
    """One import loop of ``graph`` (its modules in order), or None when there is none."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        return list(error.args[1])
    return None


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for target in _targets(ast.parse(path.read_text(encoding="utf-8")), package):
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def _targets(node: ast.AST, package: str) -> Iterator[str]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _targets(other, package)
            continue
        if isinstance(child, ast.Import):
            yield from (alias.name for alias in child.names)
        elif isinstance(child, ast.ImportFrom):
            base = _absolute(child, package)
            yield from (f"{base}.{alias.name}" for alias in child.names)
        yield from _targets(child, package)


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package
    for _ in range(node.level - 1):
        base = base.rpartition(".")[0]
    return f"{base}.{node.module}" if node.module else base


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )
