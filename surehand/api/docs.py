"""The API's reference at ``/docs``: a plain page rendered from the OpenAPI document.

FastAPI's Swagger UI loads its scripts from a CDN at a floating version with no integrity
check, on the console's origin: whoever controls that CDN would run script beside a signed-in
console. This page has no script at all (and a CSP that says so); clients that want an
interactive UI point theirs at ``/openapi.json``. ``SUREHAND_API_DOCS=false`` turns both off.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'"
STYLE = (
    "body{font:15px/1.45 system-ui,sans-serif;max-width:60em;margin:0 auto;padding:0 1em;"
    "color:#1c2230}code{font:13px ui-monospace,monospace}h2{margin-top:1.6em}"
    ".op{border-top:1px solid #d8dce4;padding:.4em 0}.m{font-weight:700;display:inline-block;"
    "min-width:4em}"
)


def add_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (this page) beside ``/openapi.json``."""

    def docs(request: Request) -> HTMLResponse:
        page = render(app.openapi())
        return HTMLResponse(page, headers={"Content-Security-Policy": CSP})

    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)


def render(document: dict[str, Any]) -> str:
    """The reference page of an OpenAPI document."""
    info = document.get("info", {})
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{escape(str(info.get('title', 'API')))} reference</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(str(info.get('title', '')))} {escape(str(info.get('version', '')))}</h1>",
        f"<pre>{escape(str(info.get('description', '')))}</pre>",
        "<p>The machine-readable document: <a href='/openapi.json'>/openapi.json</a>. "
        "The review console: <a href='/ui/'>/ui/</a>.</p>",
    ]
    for path, methods in sorted(document.get("paths", {}).items()):
        for method, operation in methods.items():
            parts.append(_operation(path, method, operation))
    parts.append("</body></html>")
    return "".join(parts)


def _operation(path: str, method: str, operation: dict[str, Any]) -> str:
    params = ", ".join(
        f"<code>{escape(str(p.get('name')))}</code> ({escape(str(p.get('in')))})"
        for p in operation.get("parameters", [])
    )
    statuses = ", ".join(
        f"<code>{escape(str(code))}</code> {escape(str(answer.get('description', '')))}"
        for code, answer in operation.get("responses", {}).items()
    )
    return (
        f"<div class='op'><h2><span class='m'>{escape(method.upper())}</span> "
        f"<code>{escape(path)}</code></h2>"
        f"<p>{escape(str(operation.get('description') or operation.get('summary') or ''))}</p>"
        + (f"<p>Parameters: {params}</p>" if params else "")
        + f"<p>Answers: {statuses}</p></div>"
    )
