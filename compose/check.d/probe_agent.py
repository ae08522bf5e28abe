"""The hostile program compose/check runs as a command agent (QA, on the worker-ops
containers): from inside its sandbox it tries to reach the deployment's own doors and to read
the worker's secrets, and reports what it found as one JSON line on stdout (its REPORT):

- every target of the TASK's subject (``targets=label@host:port,...``: Postgres, Redis, the
  API, Flower and the worker's metrics port, by service name and by address): a direct TCP
  connection, and a CONNECT (and, for HTTP ports, an absolute-form GET) through the proxy the
  sandbox names in ``HTTPS_PROXY`` / ``HTTP_PROXY``, if any;
- the processes it can see, and which of their environments and command lines it can read
  that hold a database, broker or Redis URL or a password.

Run with ``--targets SPEC`` (outside any sandbox: compose/check's control, from the worker
container itself) it checks the same targets, to show they are there to be reached.

Stdlib only: it runs on whatever Python the worker image has.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import urllib.parse
from pathlib import Path
from typing import Any

MARKER = "surehand-check-probe: "
TIMEOUT = 3.0
HTTP_PORTS = {8000, 5555, 9100}  # the API, Flower, a worker's metrics
SECRETS = (
    b"SUREHAND_DATABASE_URL=",
    b"SUREHAND_REDIS_URL=",
    b"SUREHAND_BROKER_URL=",
    b"SUREHAND_API_TOKENS=",
    b"SUREHAND_METRICS_TOKEN=",
    b"POSTGRES_PASSWORD=",
    b"REDIS_PASSWORD=",
    b"postgresql+psycopg://",
    b"redis://",
)


def targets_of(spec: str) -> list[tuple[str, str, int]]:
    """``label@host:port,...`` as (label, host, port)."""
    found = []
    for item in filter(None, spec.split(",")):
        label, _, address = item.partition("@")
        host, _, port = address.rpartition(":")
        found.append((label, host, int(port)))
    return found


def spec_from_task() -> str:
    """The ``targets=`` word of the TASK's subject (its front matter line, a JSON string)."""
    task = Path(os.environ["SUREHAND_TASK_FILE"]).read_text(encoding="utf-8")
    line = next(line for line in task.splitlines() if line.startswith("subject: "))
    subject: str = json.loads(line.removeprefix("subject: "))
    return next(w.removeprefix("targets=") for w in subject.split() if w.startswith("targets="))


def direct(host: str, port: int) -> str:
    """``connected`` or why not."""
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT):
            return "connected"
    except OSError as error:
        return f"{type(error).__name__}: {error}"


def proxy_address() -> tuple[str, int] | None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        if os.environ.get(name):
            url = urllib.parse.urlsplit(os.environ[name])
            return url.hostname or "127.0.0.1", url.port or 80
    return None


def through_proxy(proxy: tuple[str, int], request: str) -> str:
    """The proxy's status line for ``request``, or why there was none."""
    try:
        with socket.create_connection(proxy, timeout=TIMEOUT) as sock:
            sock.settimeout(TIMEOUT)
            sock.sendall(request.encode())
            answer = sock.recv(512).decode(errors="replace")
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    return answer.split("\r\n", 1)[0] or "closed without an answer"


def reached_via_proxy(status: str) -> bool:
    """A 2xx status line: the proxy opened the way (CONNECT) or fetched the page (GET)."""
    parts = status.split()
    return len(parts) > 1 and parts[0].startswith("HTTP/") and parts[1].startswith("2")


def probe_target(host: str, port: int, proxy: tuple[str, int] | None) -> dict[str, Any]:
    found: dict[str, Any] = {"direct": direct(host, port)}
    if proxy is not None:
        target = f"{host}:{port}"
        head = f"HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
        found["connect"] = through_proxy(proxy, f"CONNECT {target} {head}")
        if port in HTTP_PORTS:
            found["get"] = through_proxy(proxy, f"GET http://{target}/ {head}")
    found["reached"] = found["direct"] == "connected" or any(
        reached_via_proxy(found.get(way, "")) for way in ("connect", "get")
    )
    return found


def processes() -> dict[str, Any]:
    """The processes in sight, and the secrets readable in their environments and command
    lines (names of what was found, never the values)."""
    seen, leaks = [], {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        seen.append(f"{entry.name} {comm}: {cmdline[:80].decode(errors='replace').strip()}")
        readable = cmdline
        with contextlib.suppress(OSError):  # another user's: not in sight, as it should be
            readable += (entry / "environ").read_bytes()
        found = [marker.decode() for marker in SECRETS if marker in readable]
        if found:
            leaks[f"{entry.name} {comm}"] = found
    return {"processes": sorted(seen), "secrets": leaks}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--targets", help="label@host:port,... (default: the TASK's subject)")
    args = parser.parse_args()
    proxy = proxy_address()
    report: dict[str, Any] = {
        "proxy": f"{proxy[0]}:{proxy[1]}" if proxy else None,
        "targets": {
            f"{label}@{host}:{port}": probe_target(host, port, proxy)
            for label, host, port in targets_of(args.targets or spec_from_task())
        },
        **processes(),
    }
    print(MARKER + json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
