"""The arguments of a declared operation and of its outcome, validated like every door's.

An operation reaches the service layer from an agent: a Python agent's ``ctx.operation``, a
command agent's ``surehand effect``, an LLM agent's ``effect_begin``/``effect_end`` tools. The
agent is untrusted, so the same rules hold as for a TASK (:mod:`surehand.requests`): no NUL,
no lone surrogate, lengths after NFC normalisation, and limits that fit the columns, checked in
one place (``surehand.dispatcher.operations``) whatever the door. The answer is the same on
SQLite and Postgres: JSON that Postgres' ``jsonb`` would refuse (NUL in a string, NaN) is
refused here first. Names follow a charset, so they cannot carry line breaks or Markdown into a
successor's briefing (which quotes them anyway).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationInfo, field_validator

from surehand.agents.probes.args import RESERVED, SCHEMAS, check_probe_args
from surehand.call_requests import matching, parse
from surehand.model import RetryPolicy
from surehand.requests import Edge, at_most, valid_text

MAX_NAME = 255
NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,254}\Z")
KEY_RE = re.compile(r"\A[\x21-\x7e]{1,255}\Z")  # printable ASCII, no space
PROBE_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_.:-]{0,127}\Z")
MAX_ARGS_BYTES = 64 * 1024
MAX_VALUE_BYTES = 256 * 1024
MAX_RECEIPT = 2000
MAX_ERROR = 4000
MAX_DEPTH = 32


def check_json(value: Any, *, limit: int) -> Any:
    """``value`` if it is JSON every store keeps alike, at most ``limit`` bytes as JSON."""
    _walk(value, 0)
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"must be JSON ({exc})") from None
    if size > limit:
        raise ValueError(f"is {size} bytes as JSON, over {limit}")
    return value


def _walk(value: Any, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        valid_text(value)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must not hold NaN or an infinity")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"keys must be strings, not {type(key).__name__}")
            valid_text(key)
            _walk(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _walk(item, depth + 1)


def _args(value: object) -> object:
    if not isinstance(value, Mapping):
        raise ValueError(f"must be an object of named arguments, not {type(value).__name__}")
    return check_json(dict(value), limit=MAX_ARGS_BYTES)


def _text(limit: int) -> BeforeValidator:
    def check(value: object) -> object:
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(f"must be a string, not {type(value).__name__}")
        return at_most(valid_text(value), limit)

    return BeforeValidator(check)


Name = Annotated[
    str,
    matching(
        NAME_RE,
        "1-255 characters of [A-Za-z0-9._:/@+-], not "
        "starting with punctuation (e.g. github.open_pr)",
    ),
]
Key = Annotated[str, matching(KEY_RE, "1-255 printable ASCII characters without spaces")]
ProbeName = Annotated[str, matching(PROBE_RE, "a probe name like ledger or billing.charge")]


class OperationRequest(Edge):
    """A side effect an agent declares before doing it."""

    name: Name
    args: Annotated[dict[str, Any], BeforeValidator(_args)]
    idempotency_key: Key | None = None
    retry_policy: RetryPolicy = RetryPolicy.NONE
    probe: ProbeName | None = None
    probe_args: dict[str, Any] | None = None

    @field_validator("probe")
    @classmethod
    def _probe(cls, value: str | None) -> str | None:
        if value is not None and value.startswith(RESERVED) and value not in SCHEMAS:
            raise ValueError(
                f"{value!r} is no built-in probe (built-in: {', '.join(sorted(SCHEMAS))})"
            )
        return value

    @field_validator("probe_args", mode="before")
    @classmethod
    def _probe_args(cls, value: object, info: ValidationInfo) -> object:
        if value is not None and not isinstance(value, Mapping):
            raise ValueError(f"must be an object of named arguments, not {type(value).__name__}")
        if "probe" not in info.data:
            return value  # the probe itself was refused (that error is the one reported)
        checked = check_probe_args(info.data["probe"], value)
        return None if checked is None else check_json(checked, limit=MAX_ARGS_BYTES)


class OutcomeRequest(Edge):
    """What an agent reports about an effect it began: its value, receipt, or error."""

    value: Any = None
    receipt: Annotated[str | None, _text(MAX_RECEIPT)] = None
    error: Annotated[str | None, _text(MAX_ERROR)] = None

    @field_validator("value")
    @classmethod
    def _value(cls, value: Any) -> Any:
        return check_json(value, limit=MAX_VALUE_BYTES)


def parse_operation(**arguments: Any) -> OperationRequest:
    """Validate a declared operation; ValidationFailed names the first bad argument."""
    return parse(OperationRequest, **arguments)


def parse_outcome(**arguments: Any) -> OutcomeRequest:
    """Validate an outcome; ValidationFailed names the first bad argument."""
    return parse(OutcomeRequest, **arguments)
