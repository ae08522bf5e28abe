"""Serving the API with uvicorn: in the foreground (``surehand api``) or in a background
thread (``surehand up``, tests).

The listening socket is bound by us before uvicorn starts, so a taken port fails at once with a
clear error, and port 0 (any free port) reports the port it actually got.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from surehand.errors import ConfigError

_START_TIMEOUT_S = 15.0


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; ConfigError if it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port",
            setting="SUREHAND_API_PORT",
        ) from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _config(app: FastAPI, log_level: str) -> uvicorn.Config:
    # access_log off by default: request lines would repeat every task id at INFO.
    return uvicorn.Config(app, log_level=log_level, access_log=log_level == "debug")


def serve(app: FastAPI, host: str, port: int, *, log_level: str = "info") -> None:
    """Run the API in this (main) thread until SIGINT/SIGTERM."""
    sock = bind(host, port)
    uvicorn.Server(_config(app, log_level)).run(sockets=[sock])


class BackgroundServer:
    """uvicorn in a daemon thread; ``stop()`` finishes in-flight requests and returns."""

    def __init__(self, app: FastAPI, host: str, port: int, *, log_level: str = "warning") -> None:
        self.host = host
        self.socket = bind(host, port)
        self.port: int = self.socket.getsockname()[1]
        self.server = uvicorn.Server(_config(app, log_level))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="surehand-api"
        )
        self.thread.daemon = True

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the API did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.socket.close()
