"""``http.request``: a declarative probe for HTTP APIs (a ticket, a charge, a message).

The effect declares a URL that answers whether it happened -- ``GET /tickets?external_id=X``
-- and what a yes looks like: a status (``status``, default 200) and optionally a JSON field
(``field``, a dotted path such as ``items.0.id``) that must equal ``equals`` or, without it,
be there and not empty. An ``absent_status`` (default 404), or a yes-status whose field does not
match, is *absent*; anything else (5xx, a timeout, a refused destination, an answer too large
or not JSON) is *inconclusive*. Credentials come only from the environment variables the
operator lists in ``SUREHAND_PROBE_CREDENTIALS``, named by the effect's ``auth_env``, and go
only to the scheme, host and port each is bound to there (``TICKETS_TOKEN@tickets.example.com``):
the URL is the agent's, and a credential the operator meant for one API must never reach a
server the agent picked (one of its own that egress happens to allow).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from surehand.agents.egress import normalise
from surehand.agents.probes import fetch
from surehand.agents.probes.args import HttpRequestArgs
from surehand.agents.probes.result import ProbeResult, inconclusive
from surehand.model import Operation

NAME = "http.request"
VERSION = 1
_MISSING = object()


@dataclass(frozen=True)
class HttpRequestProbe:
    """The probe, with where it may go, which variables it may send, and its time bound."""

    destinations: fetch.Destinations
    credentials: Mapping[str, frozenset[str]] = field(default_factory=dict)  # parse_credentials
    timeout: float = 10.0
    environ: Mapping[str, str] | None = None  # os.environ unless given (tests)

    def __call__(self, operation: Operation) -> ProbeResult:
        return self.check(HttpRequestArgs.model_validate(dict(operation.probe_args or {})))

    def check(self, args: HttpRequestArgs) -> ProbeResult:
        try:
            headers = self._headers(args)
            answer = fetch.get(args.url, self.destinations, headers=headers, timeout=self.timeout)
        except fetch.Refused as refused:
            return inconclusive(f"refused: {refused}", url=args.url)
        except fetch.Unreachable as error:
            return inconclusive(f"no answer: {error}", url=args.url)
        return judge(args, answer)

    def _headers(self, args: HttpRequestArgs) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "surehand-probe/1"}
        if args.auth_env is None:
            return headers
        if args.auth_env not in self.credentials:
            raise fetch.Refused(
                f"variable {args.auth_env} is not one SUREHAND_PROBE_CREDENTIALS lets probes send"
            )
        where = origin(args.url)
        if where not in self.credentials[args.auth_env]:
            host = where.partition("://")[2]
            raise fetch.Refused(
                f"variable {args.auth_env} is not bound to {where} (SUREHAND_PROBE_CREDENTIALS "
                f"would need {args.auth_env}@{host}); nothing was sent"
            )
        secret = (os.environ if self.environ is None else self.environ).get(args.auth_env)
        if not secret:
            raise fetch.Refused(f"variable {args.auth_env} is not set in this process")
        if args.auth_scheme == "Basic":
            secret = base64.b64encode(secret.encode()).decode()
        return {**headers, "Authorization": f"{args.auth_scheme} {secret}"}


def parse_credentials(text: str) -> dict[str, frozenset[str]]:
    """``SUREHAND_PROBE_CREDENTIALS``: ``VAR@host`` (sent over https to port 443 only) or
    ``VAR@host:port`` (that port), comma separated; a variable may be bound to several. A bare
    ``VAR`` is bound to nothing: it is never sent (the refusal says how to bind it)."""
    bound: dict[str, set[str]] = {}
    for entry in filter(None, map(str.strip, text.split(","))):
        name, _, where = entry.partition("@")
        places = bound.setdefault(name.strip(), set())
        if where.strip():
            places.update(_origins(where.strip()))
    return {name: frozenset(places) for name, places in bound.items()}


def _origins(where: str) -> set[str]:
    parts = urlsplit(f"//{where}")
    try:
        port = parts.port
    except ValueError:
        return set()
    host = normalise(parts.hostname or "")
    if port is None:
        return {f"https://{host}:443"}
    return {f"{scheme}://{host}:{port}" for scheme in ("http", "https")}


def origin(url: str) -> str:
    """``scheme://host:port`` of a URL, as credentials are bound."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{normalise(parts.hostname or '')}:{port}"


def judge(args: HttpRequestArgs, answer: fetch.Answer) -> ProbeResult:
    """The answer's meaning under the declared rules."""
    seen: dict[str, Any] = {"url": args.url, "status": answer.status}
    if answer.status in args.absent_status:
        return ProbeResult(False, seen)
    if answer.status not in args.status:
        return inconclusive(f"status {answer.status} is neither present nor absent", **seen)
    if args.field is None:
        return ProbeResult(True, seen)
    try:
        document = json.loads(answer.body)
    except ValueError:
        return inconclusive("the answer is not JSON", **seen)
    value = field_at(document, args.field)
    seen["field"] = args.field
    seen["value"] = None if value is _MISSING else _short(value)
    return ProbeResult(_matches(value, args.equals), seen)


def field_at(document: Any, path: str) -> Any:
    """The value at a dotted path (list items by index); ``_MISSING`` if there is none."""
    value = document
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _matches(value: Any, equals: Any) -> bool:
    if value is _MISSING:
        return False
    if equals is None:
        return value not in (None, "", [], {})
    # A value given on the command line is text: 42 and "42" are the same answer.
    return bool(value == equals or (isinstance(equals, str) and _text(value) == equals))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _short(value: Any) -> Any:
    text = json.dumps(value, default=str)
    return value if len(text) <= 200 else text[:200] + "..."
