"""An API fuzzer in the suite: schemathesis generates requests from the OpenAPI document (valid
and invalid bodies, parameters and headers) and sends them to the FastAPI app in-process, on
SQLite and Postgres. Every response must be a declared status with its declared media type and
schema, and none may be a 5xx.

Bounded so the whole fuzz stays well under a minute: a few examples per operation, derandomized
so a run is repeatable (a failure prints the request that reproduces it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.result import Ok
from schemathesis.schemas import APIOperation
from schemathesis.specs.openapi.schemas import OpenApiSchema

from surehand.api import create_app
from surehand.config import Settings
from surehand.facade import Surehand
from surehand.store import Store

TOKENS = "tok-admin=root:ADMIN:acme,tok-pm=alice:PM:acme"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES = {GenerationMode.POSITIVE: 8, GenerationMode.NEGATIVE: 6}


@pytest.fixture
def api_schema(store: Store) -> Iterator[OpenApiSchema]:
    # schemathesis' ASGI client sends Host: testserver; allow it like a proxy's name.
    config = Settings(database_url=store.url, api_tokens=TOKENS, api_allowed_hosts="testserver")
    sh = Surehand(settings=config)
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", create_app(sh))
    finally:
        sh.close()


def fuzz(operation: APIOperation[Any, Any, Any, Any], mode: GenerationMode) -> None:
    """Send ``operation`` the cases ``mode`` generates; every check must pass."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES[mode],
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Case[Any]) -> None:
        case.call_and_validate(headers={"Authorization": "Bearer tok-admin"}, checks=CHECKS)

    try:
        run()
    except Unsatisfiable:
        # No invalid request exists for it (``GET /healthz`` has no parameters to break).
        assert mode is GenerationMode.NEGATIVE, operation.label


# schemathesis' own pytest loader (``from_fixture``) does not run on pytest 9, so the test
# walks the operations itself: a failure names the operation and the request.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_5xx_and_no_schema_violation(api_schema: OpenApiSchema, mode: GenerationMode) -> None:
    """Any request the schema allows (or nearly allows) gets a declared answer, never a 5xx."""
    results = list(api_schema.get_all_operations())
    operations = [result.ok() for result in results if isinstance(result, Ok)]
    assert len(operations) == len(results)  # every operation in the document loads
    assert len(operations) >= 14
    for operation in operations:
        fuzz(operation, mode)
