"""A local HTTP server for the HTTP probes: a ticket API and a forge speaking GitHub's REST
shape for pull requests. Answers are set per path; a path can also stall or fail."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class FakeApi:
    """What the server answers: ``tickets`` by external id, ``pulls`` as (repo, head, url)."""

    port: int = 0
    tickets: dict[str, dict[str, Any]] = field(default_factory=dict)
    pulls: list[tuple[str, str, str]] = field(default_factory=list)
    stall_seconds: float = 0.0
    status: int | None = None  # every answer this status (a 5xx outage)
    drip_seconds: float = 0.0  # send the body a byte at a time, this far apart
    seen: list[dict[str, str]] = field(default_factory=list)  # each request's headers

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if self.status is not None:
            return self.status, {"message": "unavailable"}
        if path == "/tickets":
            external = query.get("external_id", [""])[0]
            return 200, {"items": [self.tickets[external]] if external in self.tickets else []}
        if path.startswith("/tickets/"):
            found = self.tickets.get(path.removeprefix("/tickets/"))
            return (200, found) if found else (404, {"message": "Not Found"})
        parts = path.strip("/").split("/")
        if len(parts) == 4 and parts[0] == "repos" and parts[3] == "pulls":
            repo = f"{parts[1]}/{parts[2]}"
            head = query.get("head", [""])[0].partition(":")[2]
            pulls = [{"html_url": url, "number": n + 1} for n, (r, h, url) in
                     enumerate(self.pulls) if r == repo and h == head]  # fmt: skip
            return 200, pulls
        return 404, {"message": "Not Found"}


@contextmanager
def serve(api: FakeApi) -> Iterator[FakeApi]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            api.seen.append(dict(self.headers))
            if api.stall_seconds:
                time.sleep(api.stall_seconds)
            parts = urlsplit(self.path)
            status, body = api.answer(parts.path, parse_qs(parts.query))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not api.drip_seconds:
                self.wfile.write(data)
                return
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(api.drip_seconds)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    api.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
