"""A hostile agent's network probes (registered in tests/hostile_agent.py's ``PROBES``).

- ``reach``: what it can open from its sandbox. ``direct``: ``host:port`` targets it connects
  to itself (an HTTP target answers its status: the local API, metrics, Flower; any other its
  first bytes); ``proxied``: URLs it asks the egress proxy for, raw (``http://`` in absolute
  form, ``connect://host:port`` as a CONNECT), the proxy's status line each; ``fetched``: URLs
  fetched as an ordinary client would (urllib, which honours HTTP_PROXY and NO_PROXY); and
  whether a name resolves inside at all.
- ``flood``: ``count`` connections to the session server, each sending half a request's head
  and then nothing, held ``seconds``; it touches ``marker`` once they are open. Then, after
  they are dropped, its own session tools still answer (the flood cost it nothing lasting).
- ``calls``: a well-behaved sibling: ``surehand effect`` ``times`` times through its session.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def _outcome(action: Any) -> str:
    try:
        return str(action())
    except OSError as error:
        return f"refused: {type(error).__name__}"


def _direct(target: str) -> str:
    host, _, port = target.rpartition(":")
    with socket.create_connection((host.strip("[]"), int(port)), timeout=3) as sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        sock.settimeout(3)
        first = sock.recv(64)
    return f"reached: {first[:12]!r}"


def _proxy_status(request: bytes) -> str:
    proxy = urlsplit(os.environ["HTTP_PROXY"])
    with socket.create_connection((proxy.hostname or "", proxy.port or 80), timeout=10) as sock:
        sock.sendall(request)
        sock.settimeout(10)
        answer = sock.recv(4096).decode("latin-1")
    return answer.split("\r\n", 1)[0].split(" ", 1)[1] if answer else "closed"


def _proxied(url: str) -> str:
    if "HTTP_PROXY" not in os.environ:
        return "no proxy"
    parts = urlsplit(url)
    if parts.scheme == "connect":
        request = f"CONNECT {parts.netloc} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n"
    else:
        request = f"GET {url} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
    return _proxy_status(request.encode())


def _fetched(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return f"{answer.status} {answer.read(64).decode(errors='replace')}"


def reach_probe(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "direct": {t: _outcome(lambda t=t: _direct(t)) for t in params.get("direct", [])},
        "proxied": {u: _outcome(lambda u=u: _proxied(u)) for u in params.get("proxied", [])},
        "fetched": {u: _outcome(lambda u=u: _fetched(u)) for u in params.get("fetched", [])},
        "resolves": _outcome(lambda: socket.getaddrinfo("example.com", 443)[0][4][0]),
        "proxy_env": sorted(n for n in os.environ if n.lower().endswith("_proxy")),
    }


def flood_probe(params: dict[str, Any]) -> dict[str, Any]:
    server = urlsplit(os.environ["SUREHAND_MCP_URL"])
    held: list[socket.socket] = []
    half = f"POST {server.path} HTTP/1.1\r\nHost: {server.netloc}\r\nAuthor".encode()
    for _ in range(int(params["count"])):
        try:
            sock = socket.create_connection((server.hostname or "", server.port or 80), timeout=2)
            sock.sendall(half)
            held.append(sock)
        except OSError:
            break
    Path(params["marker"]).touch()
    time.sleep(float(params["seconds"]))
    for sock in held:
        sock.close()
    return {"opened": len(held), "afterwards": _effect("after-the-flood")}


def calls_probe(params: dict[str, Any]) -> dict[str, Any]:
    return {"effects": [_effect(f"sibling-{n}") for n in range(int(params.get("times", 3)))]}


def _effect(name: str) -> str:
    done = subprocess.run(
        ["surehand", "effect", "--name", name, "--", "echo", "ran"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout.strip() or f"exit {done.returncode}: {done.stderr.strip()[-200:]}"


PROBES = {"reach": reach_probe, "connection_flood": flood_probe, "calls": calls_probe}
