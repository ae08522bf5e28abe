"""``surehand effect`` inside a session: a declared effect through the session MCP server.

A command agent's program holds no store URL and no surehand token but its session's
(``SUREHAND_MCP_URL``, ``SUREHAND_MCP_TOKEN``), so ``surehand effect -- CMD`` speaks to the
session server, with the official MCP client, as an LLM agent does: ``effect_begin`` commits the
intent (or answers ``already_done`` with the recorded outcome, and CMD does not run again), CMD
runs, and ``effect_end`` records its outcome. Every call is fenced in the store by the server,
for this session's attempt only.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from surehand.agents.presets import TOKEN_ENV, URL_ENV
from surehand.errors import OperationFailed, SessionError

MAX_RECORDED_OUTPUT = 65536
CALL_TIMEOUT_SECONDS = 60.0


class EffectRefused(SessionError):
    """The session server refused a call; ``problem`` is its problem document."""

    code = "effect_refused"


def session_grant(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The session server's URL and this session's token, from the environment."""
    source = os.environ if env is None else env
    url, token = source.get(URL_ENV, ""), source.get(TOKEN_ENV, "")
    if not url or not token:
        raise SessionError(
            f"surehand effect and surehand delegate run inside a command agent's session: "
            f"{URL_ENV} and {TOKEN_ENV} are set by the command agent (with the session MCP "
            "server on, the default)"
        )
    return url, token


def run_effect(
    argv: Sequence[str],
    *,
    name: str,
    key: str | None,
    policy: str,
    probe: str | None,
    probe_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Declare, run and record ``argv`` as one effect; the recorded outcome (with ``stdout``).
    ``OperationFailed`` when it exits non-zero (recorded as failed)."""
    url, token = session_grant()
    begun = call_tool(
        url,
        token,
        "effect_begin",
        {
            "name": name,
            "args": {"argv": list(argv)},
            "idempotency_key": key,
            "retry_policy": policy,
            "probe": probe,
            "probe_args": probe_args,
        },
    )
    if begun["status"] == "already_done":
        outcome = begun.get("outcome")
        return outcome if isinstance(outcome, dict) else {"stdout": ""}
    result, error = _run(argv)
    call_tool(
        url,
        token,
        "effect_end",
        {
            "operation_id": begun["operation_id"],
            "outcome": "failed" if error else "succeeded",
            "value": result,
            "error": error,
        },
    )
    if error:
        raise OperationFailed(f"the effect {name!r} failed ({error}); recorded as failed")
    return result


def _run(argv: Sequence[str]) -> tuple[dict[str, Any], str | None]:
    started = time.monotonic()
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    result = {
        "exit_code": done.returncode,
        "stdout": done.stdout[-MAX_RECORDED_OUTPUT:],
        "seconds": round(time.monotonic() - started, 3),
    }
    error = f"exit {done.returncode}: {done.stderr[-2000:]}" if done.returncode else None
    return result, error


def call_tool(url: str, token: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call one session tool; its structured answer, or :class:`EffectRefused` with the
    server's reason."""
    import anyio  # the MCP client and its stack load only when a session needs them

    return anyio.run(_call, url, token, tool, arguments)


async def _call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=CALL_TIMEOUT_SECONDS) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            result = await client.call_tool(tool, arguments)
    except Exception as error:  # the transport's own errors (refused, 401, unreachable)
        cause = _leaf(error)
        raise EffectRefused(
            f"{tool}: the session server did not answer ({type(cause).__name__}: {cause}); "
            "the session may have ended"
        ) from error
    data = result.structured_content
    if result.is_error or not isinstance(data, dict):
        problem = (data or {}).get("error", {}) if isinstance(data, dict) else {}
        detail = problem.get("detail") or _text_of(result)
        raise EffectRefused(f"{tool} refused: {detail}", problem=problem)
    return data


def _leaf(error: BaseException) -> BaseException:
    """The first error inside (nested) exception groups: what actually went wrong."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _text_of(result: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in getattr(result, "content", []))
