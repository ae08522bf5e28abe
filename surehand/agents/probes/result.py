"""What a probe answers: whether the effect happened, and what it saw to say so."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProbeResult:
    """``present``: True (the effect happened), False (it did not), None (inconclusive).
    ``saw``: what the probe observed (the remote's ref, the HTTP status), recorded with the
    case's evidence so an approver can check the answer."""

    present: bool | None
    saw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def answer(self) -> str:
        """``present``, ``absent`` or ``inconclusive``."""
        if self.present is None:
            return "inconclusive"
        return "present" if self.present else "absent"


def inconclusive(why: str, **saw: Any) -> ProbeResult:
    return ProbeResult(None, {"why": why, **saw})
