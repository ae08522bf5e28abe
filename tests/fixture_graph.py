"""Where the test suite's fixtures are defined and who imports what, as the layout rules read it.

A fixture is a function decorated with ``pytest.fixture`` (at module level or in a class);
its name is the ``name=`` it is given, else the function's. A test module is a ``test_*.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Suite:
    """The modules of a test package (dotted name -> file)."""

    root: Path

    def modules(self) -> dict[str, Path]:
        found = {}
        for path in sorted(self.root.rglob("*.py")):
            parts = list(path.relative_to(self.root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
        return found

    def fixtures(self) -> dict[str, set[str]]:
        """Each module's fixture names."""
        return {name: set(fixtures_in(_tree(path))) for name, path in self.modules().items()}

    def imports(self) -> Iterator[tuple[str, str, list[str]]]:
        """(importer, imported module, names) for every import of the suite's own modules."""
        known = self.modules()
        for importer, path in known.items():
            for node in ast.walk(_tree(path)):
                if isinstance(node, ast.ImportFrom) and node.module in known:
                    names = [alias.name for alias in node.names]
                    yield importer, node.module, names
                    yield from ((importer, f"{node.module}.{n}", []) for n in names)
                elif isinstance(node, ast.Import):
                    yield from ((importer, a.name, []) for a in node.names if a.name in known)


def is_test_module(name: str) -> bool:
    return name.rpartition(".")[2].startswith("test_")


def imports_of_test_modules(suite: Suite) -> list[str]:
    """Every import of a test module by another module."""
    known = suite.modules()
    return sorted(
        f"{importer} imports {imported}"
        for importer, imported, _names in suite.imports()
        if imported in known and is_test_module(imported) and imported != importer
    )


def fixture_imports(suite: Suite) -> list[str]:
    """Every import of a fixture (fixtures reach tests through conftest.py, not imports)."""
    fixtures = suite.fixtures()
    return sorted(
        f"{importer} imports the fixture {imported}.{name}"
        for importer, imported, names in suite.imports()
        for name in names
        if name in fixtures.get(imported, set())
    )


def defined_twice(suite: Suite) -> dict[str, list[str]]:
    """Each fixture name more than one module defines, and those modules."""
    where: dict[str, list[str]] = {}
    for module, names in suite.fixtures().items():
        for name in names:
            where.setdefault(name, []).append(module)
    return {name: modules for name, modules in sorted(where.items()) if len(modules) > 1}


def fixtures_in(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                if _is_fixture(decorator):
                    yield _fixture_name(decorator) or node.name


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
        isinstance(target, ast.Name) and target.id == "fixture"
    )


def _fixture_name(decorator: ast.expr) -> str | None:
    if isinstance(decorator, ast.Call):
        for keyword in decorator.keywords:
            if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                return str(keyword.value.value)
    return None


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))
