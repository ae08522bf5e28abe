"""MkDocs hooks (``mkdocs.yml``: ``hooks``): the generated reference pages.

Nothing generated is kept in the repository: on every build the home page is the README (its
links rewritten to stay inside the site), the settings reference is rendered from
``surehand/config/``, the CLI reference from the ``surehand`` command tree and the HTTP API
reference from the FastAPI app's OpenAPI document, which is published beside
it. So none of them can go stale.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
REPO = HERE.parent.parent
# The README's links, as seen from the site's root (docs/): one home page, one source.
README_LINKS = {"](docs/": "](", "](compose/DEPLOYMENT.md": "](deployment/guide.md"}

import cli_reference  # noqa: E402
import openapi_reference  # noqa: E402
import settings_reference  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402


def on_files(files: Files, config: Any) -> Files:
    spec = openapi_reference.document()
    pages = {
        "index.md": home_page(),
        "reference/settings.md": settings_reference.render(),
        "reference/http-api.md": openapi_reference.render(spec),
        "reference/cli.md": cli_reference.render(),
        "reference/openapi.json": json.dumps(spec, indent=2, sort_keys=True) + "\n",
    }
    for uri, content in pages.items():
        files.append(File.generated(config, uri, content=content))
    return files


def home_page() -> str:
    """The README, its links rewritten to point inside the site."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    pattern = "|".join(re.escape(link) for link in README_LINKS)
    return re.sub(pattern, lambda found: README_LINKS[found.group(0)], text)
