"""Agent handlers: the interface (SessionContext), the registry, and built-in agents."""

from __future__ import annotations

from surehand.agents.context import EffectResult, SessionContext
from surehand.agents.registry import AgentRegistry, AgentSpec

__all__ = ["AgentRegistry", "AgentSpec", "EffectResult", "SessionContext"]
