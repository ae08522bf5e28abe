"""What other test modules need from ``tests/agents/test_agent_network.py``.

No test module imports another; fixtures reach tests through ``tests/conftest.py``.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any


class Answering(BaseHTTPRequestHandler):
    """A destination: answers every GET and POST with its path (and a POST's body)."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = f"{self.command} {self.path} {self.rfile.read(length).decode()}".strip()
        if self.command == "POST":  # and the Host it was asked for
            body += f" Host: {self.headers.get('host')}"
        body_bytes = body.encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body_bytes)))
        self.end_headers()
        self.wfile.write(body_bytes)

    do_GET = do_POST = _answer

    def log_message(self, fmt: str, *args: Any) -> None:
        pass
