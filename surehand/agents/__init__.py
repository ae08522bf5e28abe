"""Agent handlers: the interface (SessionContext), the registry, and built-in agents.

The names below are imported on first use (PEP 562): ``surehand effect``, which a command
agent runs for every effect it declares, imports ``surehand.agents.session_client`` and so this
package, and needs neither the registry nor the session context (nor pydantic's models).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from surehand.lazy import exports

if TYPE_CHECKING:
    from surehand.agents.context import EffectResult, SessionContext
    from surehand.agents.registry import AgentRegistry, AgentSpec

__getattr__, __dir__ = exports(
    __name__,
    {
        "EffectResult": "surehand.agents.context",
        "SessionContext": "surehand.agents.context",
        "AgentRegistry": "surehand.agents.registry",
        "AgentSpec": "surehand.agents.registry",
    },
)

__all__ = ["AgentRegistry", "AgentSpec", "EffectResult", "SessionContext"]
