"""Settings of the doors and the processes serving them: the FCOP mirror, the HTTP API and
its tokens, the console, text search, metrics, MCP, ``surehand up``, Flower and log format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class DoorSettings(BaseModel):
    """How surehand is reached: API, console, MCP, metrics, Flower, logs."""

    fcop_dir: Path | None = Field(None, description="If set, mirror TASK/REPORT files here.")
    api_tokens: str = Field(
        "",
        description="Comma list token=name:ROLE:tenant for the HTTP API and MCP over HTTP; "
        "empty means one local ADMIN principal, allowed only on a loopback address.",
    )
    api_host: str = Field(
        "127.0.0.1", description="Address `surehand api` and `surehand up` bind (loopback)."
    )
    api_port: int = Field(8000, ge=0, le=65535, description="Port of the HTTP API (0: any).")
    api_publisher: Literal["thread", "process"] = Field(
        "process",
        description="Where `surehand api` publishes created TASKs from the outbox: a thread of "
        "the API process, or a child process woken through a pipe (the publish's CPU then "
        "leaves the API's interpreter lock: for hosts with a core to spare; docs/configuration.md: "
        "The API's publisher).",
    )
    api_max_body_bytes: int = Field(
        2 * 1024 * 1024,
        gt=0,
        description="Largest request body the API reads (a 1 MiB TASK body plus its JSON "
        "envelope); larger requests get 413 before anything is parsed or written.",
    )
    api_allowed_hosts: str = Field(
        "",
        description="Comma list of Host names (name, or name:port) the HTTP API and MCP over HTTP "
        "answer besides the loopback names 127.0.0.1, localhost and [::1]; any other Host gets "
        "421 (protection against DNS rebinding). Add the names clients use behind a proxy.",
    )
    api_forwarded_allow_ips: str = Field(
        "",
        description="Comma list of proxy addresses (IPs or networks, or *) whose "
        "X-Forwarded-For and X-Forwarded-Proto headers the API (and MCP over HTTP) believes; "
        "default none: from anyone else they are ignored, since any local process could "
        "otherwise pick the address it is throttled as. Behind a TLS proxy, list its address "
        "so that the console sees https (its cookie gets Secure) and the real client address "
        "(failed tokens are counted per client).",
    )
    api_docs: bool = Field(
        True,
        description="Serve the API's reference at /docs (a plain page, no scripts) and its "
        "OpenAPI document at /openapi.json; false turns both off (404).",
    )
    console_idle_seconds: float = Field(
        1800.0,
        gt=0,
        description="A console session unused this long (no page opened; the live refresh does "
        "not count) ends; the next page asks to sign in again.",
    )
    console_session_seconds: float = Field(
        8 * 3600.0, gt=0, description="The longest a console session lasts, used or not."
    )
    console_searches_per_minute: int = Field(
        60,
        ge=1,
        description="Text searches (a board, list or live refresh with a search) one console "
        "principal may run per minute, with as many at once; beyond, 429 with Retry-After.",
    )
    search_scan_rows: int = Field(
        5000,
        ge=100,
        le=1_000_000,
        description="TASKs a text search (the console's search box, Surehand.find_tasks and "
        "count_tasks with text) reads per query: the newest ones that pass the other filters. "
        "A page that ends there offers the next one; a count past it is a lower bound.",
    )
    metrics_token: str = Field(
        "",
        description="Bearer token for /metrics (the API's and a worker's metrics port). With "
        "SUREHAND_API_TOKENS set, the API's /metrics (which counts every tenant's TASKs) answers "
        "only this token; without API tokens (loopback only) it is open unless this is set.",
    )
    mcp_transport: str = Field(
        "stdio", description="`surehand mcp` transport: stdio (agent hosts) or http."
    )
    mcp_host: str = Field("127.0.0.1", description="Address `surehand mcp --transport http` binds.")
    mcp_port: int = Field(8001, ge=0, le=65535, description="Port of the MCP HTTP transport.")
    up_concurrency: int = Field(
        4, ge=1, description="Sessions `surehand up` runs at once (worker threads)."
    )
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="If set, `surehand worker` serves Prometheus /metrics on this port (the API "
        "and `surehand up` serve theirs at /metrics already); 0 turns it off.",
    )
    metrics_host: str = Field("127.0.0.1", description="Address of the worker's metrics port.")
    flower_host: str = Field("127.0.0.1", description="Address `surehand flower` binds.")
    flower_port: int = Field(5555, ge=1, le=65535, description="Port of `surehand flower`.")
    log_format: Literal["text", "json"] = Field(
        "text",
        description="text, or json: one JSON object per line on stdout (time, level, logger, "
        "message, task) for a log shipper; applies to `surehand worker`, `beat` and `api`.",
    )
