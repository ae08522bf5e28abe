"""Serving an ASGI app with uvicorn, shared by the HTTP API and the MCP HTTP transport: in the
foreground (``surehand api``, ``surehand mcp --transport http``) or in a background thread
(``surehand up``, tests).

The listening socket is bound here before uvicorn starts, so a taken port fails at once with a
clear error, and port 0 (any free port) reports the port it actually got. In the foreground,
Ctrl-C or SIGTERM ends the process with exit 0 after uvicorn's graceful shutdown.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from surehand.errors import ConfigError

_START_TIMEOUT_S = 15.0


def bind(host: str, port: int, *, setting: str = "SUREHAND_API_PORT") -> socket.socket:
    """A listening TCP socket on ``host:port``; ConfigError naming ``setting`` if it fails."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on an accepted connection only when the
    # socket says TCP, and without it every keep-alive response (headers, then body) waited
    # for the client's delayed ACK, ~40 ms a request (tests/unit/test_serving_nodelay.py).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}): is another server using port "
            f"{port}? Choose another with --port or {setting}",
            setting=setting,
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def bind_in(host: str, ports: range, *, setting: str) -> socket.socket:
    """A listening TCP socket on the first free port of ``ports``; ConfigError naming
    ``setting`` when every one is taken."""
    for port in ports:
        try:
            return bind(host, port, setting=setting)
        except ConfigError:
            continue
    raise ConfigError(
        f"no free port on {host} in {setting}={ports.start}-{ports.stop - 1} (all "
        f"{len(ports)} in use): widen the range, or stop what holds them",
        setting=setting,
    )


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``. Anyone who can reach the path may connect (an
    agent running as another user, through a bind mount): keep it in a private directory."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    path.chmod(0o666)
    sock.listen(2048)
    return sock


def _config(app: Any, log_level: str, forwarded_allow_ips: str | None) -> uvicorn.Config:
    # access_log off unless debugging: request lines would repeat every task id at INFO.
    # Proxy headers (X-Forwarded-For/-Proto) are believed only from the addresses listed
    # (SUREHAND_API_FORWARDED_ALLOW_IPS), none by default: anyone else could claim any address
    # or scheme (uvicorn's own default would trust 127.0.0.1, i.e. every local process).
    from surehand import logjson

    listed = (forwarded_allow_ips or "").strip()
    return uvicorn.Config(
        app,
        log_level=log_level,
        log_config=logjson.uvicorn_log_config() or uvicorn.config.LOGGING_CONFIG,
        access_log=log_level == "debug",
        proxy_headers=bool(listed),
        forwarded_allow_ips=listed or None,
    )


def url_of(host: str, port: int) -> str:
    """``http://host:port`` (an IPv6 host in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    app: Any,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    setting: str = "SUREHAND_API_PORT",
    announce: Callable[[str], object] | None = None,
    forwarded_allow_ips: str | None = None,
) -> None:
    """Run ``app`` in this (main) thread until SIGINT/SIGTERM, then return normally.

    ``announce(url)`` is called once the socket listens (with the real port when 0 was asked
    for): a URL printed before that could name a port some other server holds."""
    sock = bind(host, port, setting=setting)
    if announce is not None:
        announce(url_of(host, sock.getsockname()[1]))
    with quiet_signals():
        uvicorn.Server(_config(app, log_level, forwarded_allow_ips)).run(sockets=[sock])


@contextlib.contextmanager
def quiet_signals() -> Iterator[None]:
    """Let a signal that stopped uvicorn end the process with exit 0.

    uvicorn handles SIGINT/SIGTERM itself and, after its graceful shutdown, raises the signal
    again for the previous handlers: with Python's defaults that is a KeyboardInterrupt (exit
    130) or death by SIGTERM. A shutdown on request is a success, so the previous handlers are
    no-ops while uvicorn runs.
    """
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    return None


class BackgroundServer:
    """uvicorn in a daemon thread; ``stop()`` finishes in-flight requests and returns."""

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        *,
        log_level: str = "warning",
        unix_socket: Path | None = None,
        forwarded_allow_ips: str | None = None,
        listening: socket.socket | None = None,
    ) -> None:
        self.host = host
        # ``listening``: a socket the caller bound already (e.g. within a port range).
        self.socket = listening or bind(host, port)
        self.port: int = self.socket.getsockname()[1]
        # The same app on a Unix socket too (``unix_socket``): the session server's door for
        # agents whose sandbox has no network.
        self.unix_socket = unix_socket
        self.sockets = [self.socket, *([bind_unix(unix_socket)] if unix_socket else [])]
        self.server = uvicorn.Server(_config(app, log_level, forwarded_allow_ips))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": self.sockets}, name="surehand-http"
        )
        self.thread.daemon = True

    @property
    def url(self) -> str:
        """``http://host:port`` as bound (the real port when 0 was asked for)."""
        return url_of(self.host, self.port)

    def start(self) -> BackgroundServer:
        """Start serving and wait until uvicorn accepts connections."""
        self.thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, finish in-flight requests, close the socket."""
        self.server.should_exit = True
        self.thread.join(timeout)
        for sock in self.sockets:
            sock.close()
