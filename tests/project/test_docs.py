"""The documentation site: the README leads into it, its generated reference pages say
everything the code declares, and it builds with ``mkdocs build --strict`` (as ``.ci/run``
does), so no link or anchor in it is broken."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from surehand.config import Settings
from tests.skips import missing

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
GENERATED = DOCS / "_gen"
# Pages docs/_gen/hooks.py renders on every build (never kept in the repository).
GENERATED_PAGES = {f"docs/reference/{name}.md" for name in ("settings", "http-api", "cli")}


def generator(name: str) -> ModuleType:
    """One of the site's generator modules (``docs/_gen/<name>.py``), loaded from its file."""
    spec = importlib.util.spec_from_file_location(f"docs_gen_{name}", GENERATED / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_links() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return [link for link in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in link]


def test_every_link_of_the_readme_leads_to_a_file_of_the_repository() -> None:
    links = readme_links()
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        path = link.split("#", 1)[0]
        assert path in GENERATED_PAGES or (REPO / path).is_file(), link


def test_the_readme_is_the_short_way_in() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    headings = [line for line in readme.splitlines() if re.match(r"#+ ", line)]
    assert headings[:3] == ["# surehand", "## Two promises", "## A tour"]
    assert "## Documentation" in headings


def test_every_setting_is_in_the_reference_with_its_type_default_and_description() -> None:
    page = generator("settings_reference").render()
    for name, info in Settings.model_fields.items():
        variable = f"SUREHAND_{name.upper()}"
        entry = page.split(f"### `{variable}` {{#{variable.lower()}}}\n", 1)[1].split("\n### ")[0]
        facts = entry.strip().splitlines()[0]
        assert facts.startswith("type "), variable
        assert " · default " in facts, variable
        assert (info.description or "").strip() in entry, variable


def test_the_settings_reference_says_types_defaults_and_bounds_as_the_code_does() -> None:
    page = generator("settings_reference").render()
    sandbox = page.split("### `SUREHAND_AGENT_SANDBOX`", 1)[1].split("\n### ")[0]
    assert "type `auto` \\| `bwrap` \\| `none` · default `auto`" in sandbox
    pool = page.split("### `SUREHAND_DATABASE_POOL_SIZE`", 1)[1].split("\n### ")[0]
    assert "type int · default `10` · ≥ 1, ≤ 1000" in pool
    assert "| [`SUREHAND_FCOP_DIR`](#surehand_fcop_dir) | path or unset | unset |" in page


def test_every_route_of_the_openapi_document_is_in_the_api_reference() -> None:
    module = generator("openapi_reference")
    spec = module.document()
    page = module.render(spec)
    assert spec["paths"]
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"### `{method.upper()} {path}`" in page, (method, path)
    for name in spec["components"]["schemas"]:
        assert f"### {name} {{#schema-{name.lower()}}}" in page


def test_every_command_of_the_cli_is_in_the_cli_reference_with_its_variables() -> None:
    page = generator("cli_reference").render()
    for command in ("up", "worker", "submit", "review", "db upgrade", "fcop export", "effect"):
        assert f"## `surehand {command}`" in page, command
    worker = page.split("## `surehand worker`", 1)[1].split("\n## ")[0]
    assert "| `--roles` | yes |  | `SUREHAND_ROLES` |" in worker


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        missing("mkdocs (the dev extras) for the documentation site")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)]
    done = subprocess.run(build, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    home = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "./scripts/test" in home  # the README is the home page
    assert (tmp_path / "reference" / "openapi.json").is_file()
    for page in ("reference/settings", "reference/http-api", "reference/cli", "deployment/guide"):
        assert (tmp_path / page / "index.html").is_file(), page


@pytest.mark.parametrize("page", sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")))
def test_no_page_tells_history_by_issue_number(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    assert not re.search(r"\bissue \d+", text, re.IGNORECASE), page
