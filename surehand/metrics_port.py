"""A process's metrics port (``SUREHAND_METRICS_PORT``): a worker, which has no API, serves
its counters (:mod:`surehand.metrics`) here, in a daemon thread, behind the API's ``Host`` rule
and, when set, ``SUREHAND_METRICS_TOKEN`` (wrong tokens throttled as the API's are).

Apart from :mod:`surehand.metrics` so that counting never imports an HTTP server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, make_wsgi_app

from surehand import metrics
from surehand.config import Settings
from surehand.doors.auth import is_loopback
from surehand.doors.hosts import SETTING, HostRule
from surehand.doors.throttle import FailureThrottle, fingerprint
from surehand.errors import ConfigError
from surehand.metrics import token_matches

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def guarded(app: WSGIApp, token: str) -> WSGIApp:
    """``app`` behind ``Authorization: Bearer <token>``: 401 otherwise, and 429 (with
    ``Retry-After``) for a client or a token that keeps failing (:mod:`surehand.doors.throttle`)."""
    throttle = FailureThrottle()

    def check(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        header = environ.get("HTTP_AUTHORIZATION")
        if token_matches(token, header):
            return app(environ, start_response)
        scheme, _, presented = (header or "").partition(" ")
        refusal = None
        if scheme.lower() == "bearer" and presented.strip():
            client = str(environ.get("REMOTE_ADDR", "unknown"))
            refusal = throttle.failed(client, fingerprint(presented.strip()), "metrics token")
        if refusal is not None:
            wait = str(refusal.details["retry_after"])
            start_response("429 Too Many Requests", [*_PLAIN, ("Retry-After", wait)])
            return [f"{refusal.message}\n".encode()]
        start_response("401 Unauthorized", [*_PLAIN, ("WWW-Authenticate", _REALM)])
        return [b"send Authorization: Bearer <SUREHAND_METRICS_TOKEN>\n"]

    return check


_PLAIN = [("Content-Type", "text/plain")]
_REALM = 'Bearer realm="surehand"'


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        return None


def check_port(host: str, token: str) -> None:
    """Refuse a metrics port that anyone on the network could read: off loopback it needs
    ``SUREHAND_METRICS_TOKEN`` (the counters show the deployment's volume)."""
    if host and not token and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve the worker's metrics on {host} without SUREHAND_METRICS_TOKEN: "
            "anyone who can reach the port would read them. Set the token (Prometheus sends it "
            "as a bearer token) or bind SUREHAND_METRICS_HOST=127.0.0.1",
            setting="SUREHAND_METRICS_TOKEN",
        )


def host_checked(app: WSGIApp, hosts: HostRule) -> WSGIApp:
    """``app`` answering only the ``Host`` names of the API's rule (421 otherwise): a web page
    that rebinds its name to this port cannot read it from a browser (DNS rebinding)."""

    def check(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if hosts.allows(environ.get("HTTP_HOST")):
            return app(environ, start_response)
        start_response("421 Misdirected Request", [("Content-Type", "text/plain")])
        return [f"this port does not answer to that Host name; add it to {SETTING}\n".encode()]

    return check


def serve_metrics(
    host: str, port: int, token: str = "", hosts: HostRule | None = None
) -> WSGIServer:
    """Serve this process's metrics on ``host:port`` in a daemon thread (token if given; only
    the ``Host`` names ``hosts`` allows, loopback by default). ConfigError for a port off
    loopback without a token (:func:`check_port`)."""
    check_port(host, token)
    metrics.register()  # every counter named from the first scrape on
    app: WSGIApp = make_wsgi_app(REGISTRY)
    if token:
        app = guarded(app, token)
    app = host_checked(app, hosts or HostRule.of(()))
    server = make_server(host, port, app, _Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="surehand-metrics", daemon=True).start()
    return server


def serve_worker_metrics() -> WSGIServer | None:
    """Serve this process's counters on SUREHAND_METRICS_PORT, if set (a worker's start)."""
    settings = Settings()
    if not settings.metrics_port:
        return None
    hosts = HostRule.from_settings(settings)
    return serve_metrics(
        settings.metrics_host, settings.metrics_port, settings.metrics_token, hosts
    )


def _serve_worker_metrics(**_: Any) -> None:
    serve_worker_metrics()


def serve_when_ready() -> None:
    """Serve a worker's counters once Celery says the worker is ready (idempotent)."""
    from celery.signals import worker_ready

    worker_ready.connect(_serve_worker_metrics, weak=False, dispatch_uid="surehand.metrics.serve")
