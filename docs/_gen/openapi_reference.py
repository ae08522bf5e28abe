"""The HTTP API reference, rendered from the OpenAPI document of the FastAPI app itself.

``document()`` builds ``surehand.api.app.create_app`` on a throwaway SQLite file and asks it for
its schema (the one ``/openapi.json`` serves); ``render()`` turns that into a page: every route
with its parameters, body and answers, then every schema. ``hooks.py`` runs both on every
``mkdocs build`` and publishes the JSON beside the page.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

METHODS = ("get", "post", "put", "patch", "delete")


def document() -> dict[str, Any]:
    """The app's OpenAPI document, from an app on an empty store (no settings of the caller's
    environment are read: the app's schema does not depend on them but for ``api_docs``)."""
    from surehand.api.app import create_app
    from surehand.facade import Surehand

    with tempfile.TemporaryDirectory() as home:
        saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("SUREHAND_")}
        try:
            url = f"sqlite:///{Path(home) / 'docs.sqlite3'}"
            with Surehand(database_url=url) as sh:
                spec: dict[str, Any] = create_app(sh).openapi()
        finally:
            os.environ.update(saved)
    copy: dict[str, Any] = json.loads(json.dumps(spec))  # a plain copy, detached from the app
    return copy


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def schema_text(schema: dict[str, Any]) -> str:
    """A schema in one line: a link to a named schema, or its type."""
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[{name}](#schema-{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(schema_text(part) for part in schema[key])
    if schema.get("type") == "array":
        return f"array of {schema_text(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    return str(schema.get("type", "any"))


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _parameters(operation: dict[str, Any]) -> str:
    rows = [
        f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
        f"{schema_text(p.get('schema', {}))} | {_cell(p.get('description', ''))} |"
        for p in operation.get("parameters", [])
    ]
    if not rows:
        return ""
    return "| parameter | in | required | type | description |\n|---|---|---|---|---|\n" + (
        "\n".join(rows) + "\n\n"
    )


def _body(operation: dict[str, Any]) -> str:
    content = operation.get("requestBody", {}).get("content", {})
    return "".join(
        f"Body (`{media}`): {schema_text(item.get('schema', {}))}\n\n"
        for media, item in content.items()
    )


def _responses(operation: dict[str, Any]) -> str:
    rows = []
    for status, answer in operation.get("responses", {}).items():
        content = answer.get("content", {})
        kinds = "; ".join(
            f"`{media}` {schema_text(item.get('schema', {}))}" for media, item in content.items()
        )
        rows.append(f"| {status} | {_cell(answer.get('description', ''))} | {kinds} |")
    return "| status | meaning | content |\n|---|---|---|\n" + "\n".join(rows) + "\n"


def operation_text(path: str, method: str, operation: dict[str, Any]) -> str:
    summary = operation.get("summary", "")
    description = operation.get("description", "")
    return (
        f"### `{method.upper()} {path}`\n\n"
        + (f"**{summary}**\n\n" if summary else "")
        + (f"{description}\n\n" if description else "")
        + _parameters(operation)
        + _body(operation)
        + _responses(operation)
    )


def _schema_section(name: str, schema: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    rows = [
        f"| `{prop}` | {schema_text(spec)} | {'yes' if prop in required else 'no'} | "
        f"{_cell(spec.get('description', ''))} |"
        for prop, spec in schema.get("properties", {}).items()
    ]
    table = (
        "| field | type | required | description |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"
        if rows
        else f"{schema_text(schema)}\n"
    )
    description = _cell(schema.get("description", ""))
    return (
        f"### {name} {{#schema-{name.lower()}}}\n\n"
        + (f"{description}\n\n" if description else "")
        + table
    )


def render(spec: dict[str, Any]) -> str:
    info = spec.get("info", {})
    parts = [
        "# HTTP API reference\n\n",
        f"Generated when the site is built from the OpenAPI document of `surehand api` "
        f"(version {info.get('version', '')}): the same document a running server serves at "
        "`/openapi.json` and renders at `/docs`. The document itself: "
        "[openapi.json](openapi.json). How the doors behave — tokens, tenants, status "
        "codes, idempotency keys: [HTTP, MCP, CLI and Python](../interfaces.md).\n\n",
        f"{info.get('description', '')}\n\n",
        "## Routes\n\n",
    ]
    for path, methods in spec.get("paths", {}).items():
        for method in METHODS:
            if method in methods:
                parts.append(operation_text(path, method, methods[method]) + "\n")
    parts.append("## Schemas\n\n")
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        parts.append(_schema_section(name, schema) + "\n")
    return "".join(parts)
