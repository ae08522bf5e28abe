"""Fixtures are defined once and reach tests through conftest.py: no test module imports another
test module or a fixture, no fixture name is defined twice (a copy, or a variant that should
say how it differs), and every module that defines fixtures besides a test module is a plugin
``tests/conftest.py`` registers."""

from __future__ import annotations

from pathlib import Path

from tests import conftest
from tests.fixture_graph import (
    Suite,
    defined_twice,
    fixture_imports,
    imports_of_test_modules,
    is_test_module,
)

SUITE = Suite(Path(__file__).parents[1])


def test_no_module_imports_a_test_module() -> None:
    assert imports_of_test_modules(SUITE) == []


def test_no_module_imports_a_fixture() -> None:
    assert fixture_imports(SUITE) == []


def test_no_fixture_is_defined_twice() -> None:
    assert defined_twice(SUITE) == {}


def test_every_module_with_fixtures_but_a_test_module_is_a_registered_plugin() -> None:
    defining = {module for module, names in SUITE.fixtures().items() if names}
    shared = {m for m in defining if not is_test_module(m) and m.rpartition(".")[2] != "conftest"}
    assert shared == set(conftest.pytest_plugins)


def test_the_rules_see_a_test_module_import_a_copied_fixture_imported(tmp_path: Path) -> None:
    root = tmp_path / "tests"
    root.mkdir()
    fixture = "import pytest\n@pytest.fixture\ndef sh():\n    return 1\n"
    (root / "__init__.py").write_text("")
    (root / "test_a.py").write_text(fixture + "def helper():\n    return 2\n")
    (root / "test_b.py").write_text("from tests.test_a import helper, sh\n" + fixture)
    suite = Suite(root)
    assert imports_of_test_modules(suite) == ["tests.test_b imports tests.test_a"]
    assert fixture_imports(suite) == ["tests.test_b imports the fixture tests.test_a.sh"]
    assert defined_twice(suite) == {"sh": ["tests.test_a", "tests.test_b"]}
