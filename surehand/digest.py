"""Canonical digests: the ``write-task-v1`` request digest and operation fingerprints.

``write-task-v1``, exactly (so any client can compute it):

1. Normalise the request: fill defaults (priority ``P2``, risk_level ``medium``, empty strings
   for thread_key and parent, empty lists for references and depends_on) and map priority
   aliases (urgent/critical -> P0, high -> P1, normal -> P2, low -> P3).
2. Build a JSON object of the semantic fields only: sender, recipient, subject, body, priority,
   thread_key, parent, references, depends_on, risk_level; and ``budget_usd`` only when the
   request gives one, as a decimal string with at most six decimals and no trailing zeros
   (``"5"``, ``"0.25"``), so the digest of a request without it is what it always was.
3. In every string, turn CRLF and then lone CR into LF and normalise to Unicode NFC.
4. Serialise with keys sorted, arrays in their given order, separators ``,`` and ``:`` with no
   whitespace, non-ASCII characters written as UTF-8 (not ``\\u`` escapes).
5. SHA-256 over those bytes, lower-case hex.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Mapping
from typing import Any

from surehand.model import DIGEST_SCHEMA_VERSION, TaskFields

__all__ = [
    "DIGEST_SCHEMA_VERSION",
    "canonical_json",
    "normalize_text",
    "operation_fingerprint",
    "request_digest",
    "sha256_hex",
]


def normalize_text(value: str) -> str:
    """Line endings to LF, then Unicode NFC."""
    return unicodedata.normalize("NFC", value.replace("\r\n", "\n").replace("\r", "\n"))


def _normalize(value: Any) -> Any:
    if isinstance(value, str):
        return normalize_text(value)
    if isinstance(value, Mapping):
        return {normalize_text(str(k)): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8, strings normalised; arrays keep their order."""
    return json.dumps(
        _normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def request_digest(fields: TaskFields) -> str:
    """The write-task-v1 digest of a normalised TASK request."""
    return sha256_hex(canonical_json(fields.digest_dict()))


def operation_fingerprint(name: str, args: Mapping[str, Any]) -> str:
    """First 24 hex of SHA-256 of ``lower(name) + "\\n" + canonical JSON of args``."""
    return sha256_hex(name.lower().encode("utf-8") + b"\n" + canonical_json(dict(args)))[:24]
