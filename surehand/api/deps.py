"""Request dependencies: who is calling (bearer token → principal) and their tenant's facade."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from surehand import metrics
from surehand.doors.auth import Authenticator, Peer
from surehand.errors import Forbidden, ValidationFailed
from surehand.facade import Surehand
from surehand.model import ADMIN
from surehand.principals import Principal
from surehand.requests import check_submission_id

# Declared for the OpenAPI document (the "Authorize" button in /docs); the header is checked
# by the Authenticator so that failures get surehand's problem+json shape.
bearer = HTTPBearer(auto_error=False, description="A token from SUREHAND_API_TOKENS.")


@dataclass(frozen=True)
class Caller:
    """The authenticated principal and the facade scoped to its tenant."""

    principal: Principal
    sh: Surehand

    def acting(self, requested: str | None) -> str:
        """The acting role for a call (Forbidden if a non-ADMIN asks for another role)."""
        return self.principal.acting_role(requested)


def get_caller(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Caller:
    """Authenticate the request (AuthError → 401) and bind its principal to its tenant's facade."""
    sh: Surehand = request.app.state.surehand
    principal = authenticate(request)
    return Caller(principal, sh.acting_as(principal))


def peer_of(request: Request) -> Peer:
    """Who sent ``request`` (its address, and whether a proxy relayed it)."""
    return Peer.of(request.scope.get("client"), request.scope.get("headers", ()))


def authenticate(request: Request) -> Principal:
    """The caller's principal (``Authenticator.authenticate_client``): unknown tokens are
    counted per client and per token, and one that keeps failing is refused for a while (429);
    without tokens only a loopback client that came straight here is answered."""
    auth: Authenticator = request.app.state.auth
    header = request.headers.get("authorization")
    return auth.authenticate_client(peer_of(request), header, "API token")


CallerDep = Annotated[Caller, Depends(get_caller)]


def get_admin(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The caller, who must be an ADMIN principal (401 without a token, 403 for other roles)."""
    principal = authenticate(request)
    if principal.role != ADMIN:
        raise Forbidden(f"only an ADMIN principal may read this, not {principal.role}")
    return principal


AdminDep = Annotated[Principal, Depends(get_admin)]


def check_metrics_reader(request: Request) -> bool:
    """Let the caller read /metrics, or raise AuthError (401), TooManyAttempts (429) or
    Forbidden (403). True when the caller showed SUREHAND_METRICS_TOKEN (the operator, who may
    see tenants' names); False for the open local reader, who sees none.

    /metrics counts every tenant's TASKs. Open to loopback clients of an API without tokens
    unless SUREHAND_METRICS_TOKEN is set; once API tokens exist only that token reads it, since
    each API token is one tenant's principal. Wrong tokens are throttled as API tokens are.
    """
    auth: Authenticator = request.app.state.auth
    token: str = request.app.state.surehand.settings.metrics_token
    header = request.headers.get("authorization")
    if metrics.token_matches(token, header):
        return True
    if auth.open and not token:
        auth.require_local(peer_of(request), "/metrics")
        return False
    if auth.known(header) is not None:
        raise Forbidden(
            "/metrics counts every tenant's TASKs, so no tenant's token reads it: send "
            "SUREHAND_METRICS_TOKEN (set it on the API to scrape)"
        )
    hint = "send Authorization: Bearer <SUREHAND_METRICS_TOKEN> for /metrics"
    auth.refuse(peer_of(request), header, "metrics token", hint)


def submission_id(header: str | None, in_body: str | None) -> str | None:
    """Merge the ``Idempotency-Key`` header with a body ``client_submission_id``.

    Either may name the submission; both must then agree, since two different ids in one
    request would leave it unclear which intent the client means to retry.
    """
    if header is None:
        return in_body
    try:
        check_submission_id(header)
    except ValueError as exc:
        raise ValidationFailed("Idempotency-Key", str(exc)) from None
    if in_body is not None and in_body != header:
        raise ValidationFailed(
            "Idempotency-Key",
            "differs from client_submission_id in the body; send one of them, or the same id",
        )
    return header
