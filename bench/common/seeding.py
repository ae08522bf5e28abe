"""Rows the benchmarks insert in bulk to seed a store (no write_task: 100,000 TASKs in seconds)."""

from __future__ import annotations

from typing import Any


def seeded_task(**fields: Any) -> dict[str, Any]:
    """A ``tasks`` row: what every seeded TASK shares (a made-up digest, no thread, parent or
    dependencies, published), with ``fields`` (id, tenant, bucket, times, ...) over it."""
    shared: dict[str, Any] = {
        "sender": "PM",
        "thread_key": "",
        "parent": "",
        "references": [],
        "depends_on": [],
        "risk_level": "medium",
        "rework_round": 0,
        "request_digest": "0" * 64,
        "digest_schema_version": "write-task-v1",
        "idempotent": True,
        "document_digest": "0" * 64,
        "published": True,
    }
    return shared | fields
